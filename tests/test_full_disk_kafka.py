"""The whole daemon on a full disk, against the real broker: lagwatch runs as a process with its state directory on a
tiny tmpfs, filled to the last byte before a real group starts lagging. The alert fires and reaches Slack once, polls
go on, the failure is visible (metric, /readyz) and logged once per streak; when space comes back the state is saved
within seconds. A restart on the same state directory, full again, starts all the same (from the saved state, read
without writing), neither posts again nor re-announces the alert, and writes again once space comes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.devbroker import free_port
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.fake_slack import FakeSlack
from tests.http_client import call

pytestmark = pytest.mark.kafka


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root): disk full on demand."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def fill(path: Path) -> None:
    """Writes until not one byte more fits (unbuffered, smaller and smaller writes)."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * chunk)
    assert os.statvfs(path.parent).f_bavail == 0


def metric(base: str, name: str) -> float:
    _, text = call(base, "GET", "/metrics")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"no {name} in /metrics")


def saved_alerts(state: Path) -> dict[str, str]:
    """What is on disk (read by another connection, as the daemon runs): alert key -> state."""
    with contextlib.closing(sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)) as db:
        return {key: json.loads(body)["state"] for key, body in db.execute("SELECT key, body FROM alerts")}


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


class Run:
    """`lagwatch run` as a process on the state directory `state` (on the tiny disk), one cluster polled every second,
    a lag alert at 5 offsets behind for groups named `prefix`-*, Slack the only notifier."""

    def __init__(self, tmp_path: Path, state: Path, bootstrap: str, prefix: str, slack: FakeSlack) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.slack = slack
        self.config = tmp_path / "lagwatch.yaml"
        self.config.write_text(
            json.dumps(
                {
                    "state_dir": str(state),
                    "history_save_interval_s": 1,  # history saves fail too, every second: still one log line
                    "clusters": kafka_scenario.one_cluster(bootstrap, prefix),
                    "rules": {
                        "lag": {"warning": {"offsets": 5}, "critical": {"offsets": 10**9}, "for_s": 0},
                        **{rule: {"enabled": False} for rule in ("stopped", "stalled", "falling_behind", "expiry")},
                    },
                    "alerts": {"group_wait_s": 0, "group_interval_s": 1},
                    "http": {"host": "127.0.0.1", "port": self.port},
                    "notifiers": {
                        "log": {"enabled": False},
                        "slack": {"base_url": slack.base_url, "default_channel": "#k"},
                    },
                }
            )
        )
        self.env = {**os.environ, "LAGWATCH_NOTIFIERS__SLACK__TOKEN": slack.token}

    def start(self, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "lagwatch", "run", "--config", str(self.config), "--log-format", "json"],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
            )

    def ready(self) -> bool:
        with contextlib.suppress(OSError):
            return call(self.base, "GET", "/readyz")[0] == 200
        return False

    def polls(self) -> int:
        return int(call(self.base, "GET", "/api/v1/clusters/test")[1]["polls"])

    def firing_posts(self) -> list[str]:
        return [c.args["text"] for c in self.slack.delivered("chat.postMessage") if not c.args.get("thread_ts")]


def test_a_full_state_disk_alerts_once_keeps_polling_and_catches_up(
    bootstrap: str, tmp_path: Path, tiny_disk: Path, slack: FakeSlack
) -> None:
    prefix = unique("full")
    state = tiny_disk / "state"
    daemon = Run(tmp_path, state, bootstrap, prefix, slack)
    base, run, ready, polls, firing_posts = daemon.base, daemon.start, daemon.ready, daemon.polls, daemon.firing_posts

    first_log = tmp_path / "first.log"
    first = run(first_log)
    try:
        wait_for(ready, timeout=30, what="the first run to be ready")
        filler = tiny_disk / "filler"
        fill(filler)
        _, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30}, {0: 10})  # 20 behind: over 5
        wait_for(firing_posts, timeout=30, what="the firing message")
        wait_for(lambda: metric(base, "lagwatch_state_save_failures_total") >= 3, timeout=10, what="failed saves")
        status, readiness = call(base, "GET", "/readyz")
        assert status == 503, readiness
        assert any("saving the alert state failed" in p for p in readiness["problems"]), readiness
        before = polls()
        time.sleep(3)
        assert polls() >= before + 2  # polls go on, the disk full all the while
        assert metric(base, "lagwatch_notifications_delivered_total") == 1
        assert saved_alerts(state) == {}  # the firing alert lives in memory only
        failures = metric(base, "lagwatch_state_save_failures_total")
        assert failures >= 5  # the alert state after every poll and tick, the history every second

        filler.unlink()
        healed = time.monotonic()
        wait_for(lambda: set(saved_alerts(state).values()) == {"firing"}, timeout=10, what="the state saved")
        saved_within = time.monotonic() - healed
        wait_for(lambda: "saving the alert state failed" not in str(call(base, "GET", "/readyz")[1]), timeout=10)
        settled = metric(base, "lagwatch_state_save_failures_total")
        time.sleep(2)
        assert metric(base, "lagwatch_state_save_failures_total") == settled  # no failure since
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    assert saved_within < 5, saved_within
    lines = log_lines(first_log)
    tracebacks = [x for x in lines if "traceback" in x]
    failed = [x for x in lines if x["level"] == "error"]
    # One line per streak and component: the daemon's saves, the history's, the Slack worker's (with its traceback).
    assert sorted(x["msg"] for x in failed) == [
        "saving history failed; it stays in memory",
        "saving the alert state failed; alerting goes on from memory",
        "saving the alert state failed; delivering from memory, will save again",
    ], [x["msg"] for x in failed]
    assert len(tracebacks) <= 1, [x["msg"] for x in tracebacks]
    again = {x["msg"] for x in lines if "saved again" in x["msg"]}
    # The Slack worker says so too if it tried again (every 5 s) before the daemon's own save wrote everything owed.
    assert again - {"alert state saved again after failed saves"} == {"alert state saved again", "history saved again"}

    fill(filler)  # and full again for the second run: SQLite writes even to open a database
    second_log = tmp_path / "second.log"
    second = run(second_log)
    try:
        wait_for(ready, timeout=30, what="the second run to be ready")
        before = polls()
        wait_for(lambda: polls() >= before + 3, timeout=15, what="three polls of the second run")
        _, alerts = call(base, "GET", f"/api/v1/alerts?group={group}")
        filler.unlink()
        wait_for(lambda: "writable again" in second_log.read_text(), timeout=10, what="the state written again")
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    assert [(a["rule"], a["state"]) for a in alerts] == [("lag", "firing")]  # still firing, as before the restart
    assert len(firing_posts()) == 1 and group in firing_posts()[0]  # not announced again
    assert not slack.delivered("chat.update")  # nor changed
    errors = [x["msg"] for x in log_lines(second_log) if x["level"] == "error"]
    assert errors == [
        "state directory refuses writes (disk full or read-only?): the saved state is read, alerting goes on from "
        "memory, saves are tried again",
        "saving history failed; it stays in memory",
    ], errors


def saved_outbox(state: Path) -> list[tuple[int, int]]:
    """The queued notifications on disk: (attempts, in flight) each."""
    with contextlib.closing(sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)) as db:
        return list(db.execute("SELECT attempts, in_flight FROM outbox"))


def test_a_post_made_while_the_disk_is_full_is_not_made_again_after_a_sigkill(
    bootstrap: str, tmp_path: Path, tiny_disk: Path, slack: FakeSlack
) -> None:
    """The firing notification is queued and saved while Slack rate-limits every post; then the disk fills, Slack
    takes the post, and the delivery cannot be saved; then SIGKILL. The next start found it queued, not even marked
    as being sent, and posted it a second time; now it knows the run before did not stop cleanly and looks in
    Slack first."""
    prefix = unique("fullkill")
    state = tiny_disk / "state"
    daemon = Run(tmp_path, state, bootstrap, prefix, slack)
    slack.rate_limit_next, slack.retry_after = 10**6, 2
    first = daemon.start(tmp_path / "first.log")
    try:
        wait_for(daemon.ready, timeout=30, what="the first run to be ready")
        _, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30}, {0: 10})
        wait_for(lambda: saved_outbox(state) == [(1, 0)], timeout=30, what="the refused post saved as queued")
        fill(tiny_disk / "filler")
        slack.rate_limit_next = 0
        wait_for(daemon.firing_posts, timeout=30, what="the firing message")
        time.sleep(1)
        assert saved_outbox(state) == [(1, 0)]  # the delivery is not on disk
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    (tiny_disk / "filler").unlink()
    second_log = tmp_path / "second.log"
    second = daemon.start(second_log)
    try:
        wait_for(daemon.ready, timeout=30, what="the second run to be ready")
        wait_for(lambda: saved_outbox(state) == [], timeout=30, what="the queued notification settled")
        before = daemon.polls()
        wait_for(lambda: daemon.polls() >= before + 2, timeout=15, what="two more polls")
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    assert len(daemon.firing_posts()) == 1 and group in daemon.firing_posts()[0]
    assert slack.delivered("conversations.history")  # looked for, and found
    warnings = [x["msg"] for x in log_lines(second_log) if x["level"] == "warning"]
    assert any("did not stop cleanly" in w for w in warnings), warnings
