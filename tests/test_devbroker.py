"""`lagwatch dev-broker`: prints its bootstrap address once it accepts requests, stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig
from lagwatch.devbroker import LocalBroker, free_port
from tests import kafka_scenario
from tests.conftest import run_lagwatch, unique

pytestmark = pytest.mark.kafka


def test_dev_broker_command_serves_and_stops_on_sigterm(kafka_libs: object) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lagwatch",
            "dev-broker",
            "--port",
            str(port),
            "--set",
            "offsets.retention.minutes=7",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"bootstrap=127.0.0.1:{port}", proc.stderr.read() if proc.stderr else ""
        poller = ClusterPoller("dev", ClusterConfig(bootstrap_servers=[f"127.0.0.1:{port}"]))
        snapshot = poller.poll()
        poller.close()
        assert snapshot.ok and [b.offsets_retention_minutes for b in snapshot.brokers] == [7]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(os.environ.get("LAGWATCH_SKIP_KAFKA3") == "1", reason="LAGWATCH_SKIP_KAFKA3=1")
def test_kafka_3_9_broker_older_protocols() -> None:
    """Kafka 3.9 (controller.quorum.voters, reload4j logging, older request versions) works end to end."""
    with LocalBroker(kafka_version="3.9.2") as broker:
        topic, group = unique("t39"), unique("g39")
        kafka_scenario.create_topic(broker.bootstrap, topic, 2)
        kafka_scenario.produce(broker.bootstrap, topic, {0: 10, 1: 4})
        from kafka import TopicPartition

        c = kafka_scenario.assigned_consumer(broker.bootstrap, group, [TopicPartition(topic, 0)])
        kafka_scenario.commit(c, {TopicPartition(topic, 0): 3})
        c.close()
        poller = ClusterPoller("k39", ClusterConfig(bootstrap_servers=[broker.bootstrap]))
        snapshot = poller.poll()
        poller.close()
        assert snapshot.ok, snapshot.error
        (g,) = [g for g in snapshot.groups if g.group_id == group]
        assert {tp: c.offset for tp, c in g.committed.items()} == {(topic, 0): 3}
        assert snapshot.partitions[(topic, 0)].log_end == 10
        assert broker.log_file.exists() and "started" in broker.log_file.read_text()


def test_the_demo_alerts_the_log_only_and_records_a_local_lake(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """A configuration with notifiers and a lake but no cluster (a misspelt variable, an empty map) starts the
    demo: its made-up alerts paged the configured Slack and webhooks ('alerts go to the log', it said), and its
    polls went to the configured remote lake."""
    from contextlib import ExitStack

    from lagwatch.config import load_settings
    from lagwatch.devbroker import demo

    class Broker:  # the demo's broker and traffic, not started: what the demo makes of the settings is the test
        bootstrap = "127.0.0.1:9"

        def __init__(self, **_: object) -> None: ...
        def __enter__(self) -> Broker:
            return self

        def __exit__(self, *_: object) -> None: ...
        def kill(self) -> None: ...

    class Traffic:
        def __init__(self, _: str) -> None: ...
        def start(self) -> Traffic:
            return self

        def stop(self) -> None: ...

    monkeypatch.setattr("lagwatch.devbroker.LocalBroker", Broker)
    monkeypatch.setattr(demo, "DemoTraffic", Traffic)
    settings = load_settings(
        state_dir=tmp_path,
        notifiers={
            "slack": {"token": "xoxb-1-2-Token", "default_channel": "#prod-oncall"},
            "webhooks": {"pager": {"url": "http://127.0.0.1:9/prod-oncall"}},
        },
        lake={"enabled": True, "path": "s3://prod-bucket/lagwatch"},
    )
    with ExitStack() as cleanup:
        started = demo.start_demo(settings, cleanup)
        assert started.state_dir.is_dir()
    assert not started.state_dir.exists()  # its state goes with it (every run left a directory in /tmp)
    assert started.notifiers.slack is None and not started.notifiers.webhooks and started.notifiers.log.enabled
    assert started.lake.enabled and "://" not in started.lake.path
    assert list(started.clusters) == ["local"]


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--data-dir", "{file}"], "--data-dir {file}: cannot keep the broker's data there: File exists", 2),
        (["--port", "70000"], "--port 70000: not a TCP port (1-65535)", 2),
        (["--port", "{taken}"], "--port {taken}: cannot listen on 127.0.0.1:{taken}: Address already in use", 2),
        (["--set", "log.retention.hours=abc"], "Invalid value abc for configuration log.retention.hours", 1),
    ],
)
def test_bad_dev_broker_input_is_one_line(
    args: list[str], message: str, code: int, tmp_path: Path, kafka_libs: object
) -> None:
    """A file as --data-dir printed a traceback; a port another broker held printed that broker's bootstrap as its
    own, then 'exited unexpectedly'; a bad --set said the last frame of a Java stack trace."""
    file = tmp_path / "a-file"
    file.write_text("x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        values = {"file": file, "taken": port}
        if "--port" not in args:
            args = [*args, "--port", str(free_port())]
        done = run_lagwatch("dev-broker", *(a.format(**values) for a in args), timeout=120)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines and message.format(**values) in lines[-1], done.stderr
    assert "Traceback" not in done.stderr and "\tat " not in done.stderr
