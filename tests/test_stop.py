"""`lagwatch run` stops well inside Kubernetes' 30-s grace period, whatever its brokers and receivers do."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lagwatch import daemon as daemon_module
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot
from lagwatch.notify.settings import WebhookConfig
from lagwatch.notify.webhook import WebhookNotifier
from tests.conftest import wait_for
from tests.synthetic import TP, group, snapshot


def run_then_sigterm(
    config: Path, log: Path, ready: str, settle_s: float, env: dict[str, str] | None = None
) -> tuple[int, float]:
    """`lagwatch run` until `ready` is in its log and `settle_s` more, then SIGTERM: (exit code, seconds to exit)."""
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "lagwatch", "run", "--config", str(config), "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        wait_for(lambda: ready in log.read_text(), timeout=60, what=ready)
        time.sleep(settle_s)
        assert process.poll() is None
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=120)
        return code, time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_while_a_poll_waits_on_a_silent_broker_exits_at_once(tmp_path: Path) -> None:
    # A broker that takes connections and never answers: kafka-python's request waits out request_timeout_s (30 s),
    # and the interpreter's exit used to join the scheduler's thread inside it: 19-29 s after SIGTERM.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        config = tmp_path / "lagwatch.yaml"
        config.write_text(
            json.dumps(
                {
                    "state_dir": str(tmp_path / "state"),
                    "clusters": {"silent": {"bootstrap_servers": [f"127.0.0.1:{port}"], "request_timeout_s": 60}},
                    "http": {"enabled": False},
                }
            )
        )
        log = tmp_path / "run.log"
        # The first poll is under way, waiting on the broker, 2 s after the start.
        code, took = run_then_sigterm(config, log, '"lagwatch running"', 2)
    text = log.read_text()
    assert code == 0, text
    assert took < 12, f"exited {took:.1f} s after SIGTERM"
    assert '"lagwatch stopped"' in text  # the state was saved first
    assert "Traceback" not in text


class SlowReceiver:
    """A webhook receiver on loopback that answers each POST after `delay_s`, and counts what it took."""

    def __init__(self, delay_s: float) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.delay_s, self.received, self.answered = delay_s, 0, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.received += 1
                time.sleep(outer.delay_s)
                self.send_response(200)
                self.end_headers()
                outer.answered += 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class LaggingGroup:
    def __init__(self) -> None:
        self.t = time.time() - 600

    def poll(self) -> ClusterSnapshot:
        self.t += 30
        return snapshot(self.t, [group("g", committed={TP: 10})], {TP: 500})

    def close(self) -> None:
        pass


def _daemon_with_hook(state: Path, url: str) -> Daemon:
    settings = load_settings(
        state_dir=state,
        http={"enabled": False},
        rules={"lag": {"for_s": 0, "warning": {"offsets": 100}}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    polls = LaggingGroup()
    return Daemon(
        settings,
        clusters={"a": ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30)},
        notifiers={"hook": WebhookNotifier("hook", WebhookConfig(url=url, timeout_s=30))},
        poller_factory=lambda name, _: polls,
        reader_factory=None,
    )


def test_a_send_under_way_at_the_stop_is_waited_for_and_its_outcome_saved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A webhook answering in 3 s, a stop whose polls' grace is 1 s: the stop used to give the send what was left of
    # that grace, close the state database under it, log a traceback when it ended, and send it again at the restart.
    receiver = SlowReceiver(delay_s=3)
    try:
        daemon = _daemon_with_hook(tmp_path, receiver.url).start()
        wait_for(lambda: receiver.received == 1, timeout=20, what="the firing notification's send")
        daemon.stop(grace_s=1)
        assert receiver.answered == 1
        # This daemon's own records (another test's client threads in this worker may log about their broker).
        ours = [
            r for r in caplog.records if r.name.startswith(("lagwatch.daemon", "lagwatch.notify", "lagwatch.state"))
        ]
        assert not [r for r in ours if r.levelno >= logging.WARNING], caplog.text
        again = _daemon_with_hook(tmp_path, receiver.url)
        assert again.outbox.pending() == 0  # delivered, and known to be: nothing is sent twice
        again.store.close()
    finally:
        receiver.stop()


def test_a_send_that_outlasts_the_stop_is_one_line_not_a_traceback_and_is_sent_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_module, "SEND_STOP_WAIT_S", 1.0, raising=False)
    receiver = SlowReceiver(delay_s=3)
    try:
        daemon = _daemon_with_hook(tmp_path, receiver.url).start()
        wait_for(lambda: receiver.received == 1, timeout=20, what="the firing notification's send")
        daemon.stop(grace_s=1)
        wait_for(lambda: receiver.answered == 1, timeout=10, what="the receiver's answer")
        time.sleep(0.5)  # the worker has seen the answer, and tried to save it
        assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.exc_info]
        (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert "not saved" in line.getMessage()
        again = _daemon_with_hook(tmp_path, receiver.url)
        assert again.outbox.pending("hook") == 1  # at least once: the receiver may see it twice, never zero times
        again.store.close()
    finally:
        receiver.stop()


def test_a_lake_target_that_never_answers_does_not_hold_the_stop(tmp_path: Path) -> None:
    """The lake on an object store that takes connections and never answers: the writer's last flush waited on
    it without a limit, and the interpreter's exit on its thread: SIGTERM to exit took 292 s."""
    with socket.socket() as broker, socket.socket() as store:
        for s in (broker, store):
            s.bind(("127.0.0.1", 0))
            s.listen(64)
        config = tmp_path / "lagwatch.yaml"
        lake = f"s3://lake/lw?endpoint_override=127.0.0.1:{store.getsockname()[1]}&scheme=http&region=us-east-1"
        config.write_text(
            json.dumps(
                {
                    "state_dir": str(tmp_path / "state"),
                    "clusters": {
                        "silent": {
                            "bootstrap_servers": [f"127.0.0.1:{broker.getsockname()[1]}"],
                            "poll_interval_s": 1,
                            "request_timeout_s": 2,
                            "exact_clocks": False,
                        }
                    },
                    "http": {"enabled": False},
                    "lake": {"enabled": True, "path": lake, "roll_seconds": 1},
                }
            )
        )
        log = tmp_path / "run.log"
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        # 4 s after a failed poll's rows are buffered, the writer is inside its write to the store.
        code, took = run_then_sigterm(config, log, '"poll failed"', 4, env)
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert took < 20, f"exited {took:.1f} s after SIGTERM"
    assert "lake rows lost at shutdown" in text and '"lagwatch stopped"' in text


def _demo(tmp_path: Path, cache: Path | None) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`lagwatch run` without a cluster (the demo), in a session of its own as in a terminal, its temporary files
    (the broker's data) under tmp_path/tmp: (process, its stderr, that directory)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "LAGWATCH_HTTP__ENABLED": "false"}
    if cache is not None:
        env["LAGWATCH_CACHE_DIR"] = str(cache)
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "lagwatch", "run"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    return process, log, temp


def _left_running(marker: Path) -> list[int]:
    """Processes whose command line names `marker` (the broker's data directory, Maven's pom)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(marker) in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def _kill_left(marker: Path) -> None:
    """A failed test leaves no broker behind (it runs in a session of its own)."""
    for pid in _left_running(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.kafka
def test_ctrl_c_while_the_demo_fetches_kafka_stops_at_once_and_leaves_nothing(tmp_path: Path, kafka_libs: Path) -> None:
    """A first start fetches Kafka's jars for minutes: Ctrl-C did nothing until the demo was up, and killed Maven
    (in the terminal's process group), whose failure was reported instead. Now the start-up stops at once, Maven
    with it, and the broker's temporary data goes too."""
    cache = tmp_path / "cache"
    process, log, temp = _demo(tmp_path, cache)
    try:
        wait_for(lambda: "fetching Apache Kafka" in log.read_text(), timeout=60, what="the jars' fetch")
        time.sleep(0.5)
        assert process.poll() is None
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground process group
        code = process.wait(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        time.sleep(0.5)
        left = _left_running(cache) + _left_running(temp)
        _kill_left(cache)
        _kill_left(temp)
    err = log.read_text()
    assert code == 0 and elapsed < 5, (code, elapsed, err)
    assert "stopped while the demo was starting" in err and "maven could not fetch" not in err, err
    assert left == [] and list(temp.iterdir()) == []


@pytest.mark.kafka
def test_a_second_ctrl_c_during_the_demos_stop_leaves_no_broker_running(tmp_path: Path, kafka_libs: Path) -> None:
    """The demo's broker runs in a session of its own (a Ctrl-C reaches lagwatch, which stops it). A second Ctrl-C
    during the stop exits at once: the broker was left running, with its gigabyte of heap. It is killed now."""
    process, log, temp = _demo(tmp_path, None)
    try:
        wait_for(lambda: "lagwatch running" in log.read_text(), timeout=120, what="the demo")
        assert _left_running(temp)  # the broker, running from under tmp_path/tmp
        os.killpg(process.pid, signal.SIGINT)
        # Again until it exits: the second signal must come while the stop is under way (a stop quicker than a
        # fixed 0.2 s left no second signal to handle, and the test failed).
        give_up = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < give_up:
            time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    try:
        assert code == 1 and "second signal during the stop" in log.read_text()
        wait_for(lambda: not _left_running(temp), timeout=10, what="the broker's end")
    finally:
        _kill_left(temp)


@pytest.mark.parametrize("after_s", [0.0, 0.1, 0.2, 0.3, 0.45])
def test_ctrl_c_while_the_command_loads_is_quiet(tmp_path: Path, after_s: float) -> None:
    """A Ctrl-C in the first half second (the CLI's modules loading) printed an import's traceback. Counted from
    when the entry point is imported, which the child says (a signal during Python's own start-up is Python's:
    timing that start-up from outside was not enough on a busy machine)."""
    config = tmp_path / "c.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nhttp: {{enabled: false}}\nclusters: {{x: {{bootstrap_servers: '127.0.0.1:9'}}}}\n"
    )
    child = (  # what the `lagwatch` script does, once its entry point is imported
        "import sys; from lagwatch.entry import main; print('up', flush=True); "
        f"sys.argv = ['lagwatch', 'run', '--config', {str(config)!r}]; sys.exit(main())"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    assert proc.returncode in (0, 130), (proc.returncode, err)
