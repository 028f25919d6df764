"""Streams groups (KIP-1071, Kafka Streams with group.protocol=streams, Kafka 4.2+) on the real broker, with a real
Kafka Streams application (tests/clients/WordApp.java). DescribeGroups answers "not a classic group" for them:
every poll read the group as unreadable, its rules frozen, and a dead application with 1,000 records of lag paged
only `group_unreadable` after 5 minutes. Described with StreamsGroupDescribe, a streams group is watched as any
consumer group, with figures equal to Kafka's own `kafka-streams-groups`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import run_kafka_tool
from lagwatch.lag import group_lag
from lagwatch.model import GroupKind
from tests import kafka_scenario
from tests.conftest import KAFKA_VERSION, unique, wait_for
from tests.live import Background, Recorder, poll_until_paged, window_rules

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) < (4, 2), reason="streams groups need Kafka 4.2+"
    ),
]


def test_a_streams_group_is_watched_with_kafkas_own_figures_and_pages_lag(
    bootstrap: str, kafka_libs: Path, tmp_path: Path
) -> None:
    prefix = unique("streams")
    topic, app_id = f"{prefix}-in", f"{prefix}-app"
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.create_topic(bootstrap, f"{topic}-out", 2)
    kafka_scenario.produce(bootstrap, topic, {0: 300, 1: 300})
    streams = kafka_scenario.streams_libs(KAFKA_VERSION)
    app = subprocess.Popen(
        kafka_scenario.streams_app(kafka_libs, streams, bootstrap, app_id, topic, sleep_ms=20),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KAFKA_LOG4J_OPTS": ""},
    )
    config = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]))
    poller = ClusterPoller("streams", config)
    try:

        def consuming() -> object:
            snapshot = poller.poll()
            found = [g for g in snapshot.groups if g.group_id == app_id]
            group = found[0] if found else None
            # Both partitions committed: Kafka's tool counts a partition without a commit from its log start,
            # lagwatch (as kafka-consumer-groups) shows no lag for it.
            return group and group.members and len(group.committed) == 2 and group

        running = wait_for(consuming, timeout=90, interval=0.5, what="the Streams application to commit")
        assert running.kind is GroupKind.STREAMS and running.error is None and running.state == "Stable"
        (member,) = running.members
        assert sorted(member.assignment) == [(topic, 0), (topic, 1)]  # its active tasks' source partitions
        app.send_signal(signal.SIGKILL)  # dies with lag left: its member stays until the session times out
        app.wait(10)
        time.sleep(1)
        snapshot = poller.poll()
        (group,) = [g for g in snapshot.groups if g.group_id == app_id]
        ours = {(p.topic, p.partition): p.lag for p in group_lag(group, snapshot.partitions).partitions}
        theirs = _kafka_streams_groups_lag(kafka_libs, bootstrap, app_id)
        assert ours == theirs and sum(theirs.values()) > 0
    finally:
        if app.poll() is None:
            app.kill()
        poller.close()

    # The daemon reads it as readable, and its rules run: `lag` pages it (group_unreadable never does).
    record = Recorder()
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules={"lag": {"warning": {"offsets": 5}, "for_s": 0}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    daemon = Daemon(settings, clusters={"streams": config}, notifiers={"record": record})
    daemon.dispatcher.start()
    try:
        for _ in range(2):
            daemon.poll_cluster("streams")
        wait_for(lambda: record.kinds(app_id), timeout=10, what="the lag page")
    finally:
        daemon.stop()
    assert ("firing", ("lag",)) in record.kinds(app_id)
    assert not [n for n in record.sent for a in n.alerts if a.rule == "group_unreadable"]


def _kafka_streams_groups_lag(libs: Path, bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """`kafka-streams-groups --describe --offsets`: GROUP TOPIC PARTITION OFFSET-LAG per row."""
    out = run_kafka_tool(
        libs,
        "org.apache.kafka.tools.streams.StreamsGroupCommand",
        *("--bootstrap-server", bootstrap, "--describe", "--offsets", "--group", group),
    )
    rows = [line.split() for line in out.splitlines() if line.startswith(group)]
    return {(topic, int(partition)): int(lag) for _, topic, partition, lag, *_ in rows}


def test_a_dead_and_a_hung_streams_application_page_and_a_healthy_one_does_not(
    bootstrap: str, kafka_libs: Path, tmp_path: Path
) -> None:
    """Every consumer rule applies to a streams group: killed, it pages `stopped` once its session ends (6 s on the
    tests' broker) and the window passes; its stream thread blocked in a record, `stalled`; busy and healthy,
    nothing."""
    prefix = unique("apps")
    names = ("healthy", "hung", "dead")
    topics = {name: f"{prefix}-{name}-in" for name in names}
    apps = {name: f"{prefix}-{name}" for name in names}
    for name in names:
        kafka_scenario.create_topic(bootstrap, topics[name], 1)
        kafka_scenario.create_topic(bootstrap, f"{topics[name]}-out", 1)
    # The dead one's session ends 6 s after its SIGKILL (the broker's default is 45 s).
    kafka_scenario.group_config(bootstrap, apps["dead"], {"streams.session.timeout.ms": "6000"})
    kafka_scenario.produce(bootstrap, topics["hung"], {0: 300})
    kafka_scenario.produce(bootstrap, topics["dead"], {0: 3000})
    streams = kafka_scenario.streams_libs(KAFKA_VERSION)
    env = {**os.environ, "KAFKA_LOG4J_OPTS": ""}

    def start(name: str, sleep_ms: int, hang_after: int = 0) -> subprocess.Popen[str]:
        command = kafka_scenario.streams_app(
            kafka_libs, streams, bootstrap, apps[name], topics[name], sleep_ms, hang_after
        )
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    # The hung one works 20 ms a record, so that it commits (every 500 ms) before it blocks in its 120th record: a
    # hang before any commit is `no_commit`'s (at 0 ms it took all 120 before its first commit, under load).
    running = {"healthy": start("healthy", 0), "hung": start("hung", 20, hang_after=120), "dead": start("dead", 20)}
    traffic = Background()
    traffic.produce(bootstrap, topics["healthy"], 20)  # the healthy application gets 20 records a second
    record = Recorder()
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules={**window_rules(10, stalled={"learn_commit_interval": False}), "no_commit": {"window_s": 10, "for_s": 0}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    config = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]))
    poller_check = ClusterPoller("apps", config)
    daemon = Daemon(settings, clusters={"apps": config}, notifiers={"record": record})
    daemon.dispatcher.start()
    try:

        def committed(name: str) -> bool:
            snapshot = poller_check.poll()
            return any(g.group_id == apps[name] and g.committed for g in snapshot.groups)

        for name in names:  # each application has committed once: a hang before that is `no_commit`'s
            wait_for(lambda name=name: committed(name), timeout=120, interval=1, what=f"{name} committing")
        wait_for(lambda: "hung" in (running["hung"].stdout.readline() or "hung"), timeout=60, what="the hang")
        running["dead"].send_signal(signal.SIGKILL)
        running["dead"].wait(10)
        paged_after = poll_until_paged(daemon, "apps", record, {n: apps[n] for n in ("hung", "dead")}, timeout=90)
    finally:
        traffic.stop()
        poller_check.close()
        daemon.stop()
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
    assert record.kinds(apps["hung"]) == [("firing", ("stalled",))]
    assert record.kinds(apps["dead"]) == [("firing", ("stopped",))]
    assert record.kinds(apps["healthy"]) == []
    # The session's 6 s and the 10-s window, and a few polls (1-3 s each on two loaded cores).
    assert paged_after["dead"] < 6 + 10 + 8, paged_after
    assert paged_after["hung"] < 10 + 8, paged_after
