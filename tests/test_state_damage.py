"""A damaged `state.db` is detected, said and survived: each damage found by testing as a hostile user would, on a
real state directory left by a real daemon, ending with nothing lost, nothing announced twice and one clear line.

Before: a dropped table was recreated empty without a word (queued deliveries lost, incidents announced again,
notification ids issued again from 00000001), a foreign SQLite file was taken for lagwatch's, a row of another
shape crash-looped the daemon, a stored silence whose regex no longer compiled failed every poll."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagwatch.alerts import Notification
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot
from lagwatch.notify.base import RetryableError
from lagwatch.serve import health
from tests.conftest import wait_for
from tests.fake_slack import FakeSlack
from tests.live import Recorder
from tests.synthetic import TP, group, snapshot

STUCK = ("stuck0", "stuck1", "stuck2")


class Polls:
    """Three groups without a consumer, lagging: each pages `stopped` after its window."""

    start = time.time() - 3600

    def __init__(self, name: str, config: ClusterConfig) -> None:
        self.name = name

    def poll(self) -> ClusterSnapshot:
        Polls.start += 30
        groups = [group(g, committed={TP: 10}, state="Empty", members=0) for g in STUCK]
        return dataclasses.replace(snapshot(Polls.start, groups, {TP: 500}), cluster=self.name)

    def close(self) -> None:
        pass


class Refusing:
    """A receiver that is down: what is sent to it stays queued."""

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        raise RetryableError("down for the test", maybe_acted=False)


def _daemon(state: Path, notifiers: dict[str, Any]) -> Daemon:
    settings = load_settings(
        state_dir=state,
        http={"enabled": False},
        rules={"stopped": {"window_s": 60}, "lag": {"enabled": False}},
        alerts={"group_wait_s": 0, "group_interval_s": 0, "repeat_interval_s": 3600},
    )
    cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30)
    return Daemon(settings, {"c": cluster}, notifiers, poller_factory=Polls, reader_factory=None)


def _ids(notes: list[Notification]) -> set[int]:
    return {int(n.id) for n in notes}


def first_run(state: Path) -> tuple[Recorder, Daemon]:
    """Every group paged to `record`; `held` is down, so its three notifications stay queued. Stopped cleanly
    (which leaves the last good copy) unless the caller takes the daemon over."""
    Polls.start = time.time() - 3600  # each test's polls an hour ago on: the second run's go on from the first's
    record = Recorder()
    daemon = _daemon(state, {"record": record, "held": Refusing()})
    daemon.dispatcher.start()
    for _ in range(5):
        daemon.poll_cluster("c")
    wait_for(lambda: len(record.sent) == len(STUCK), timeout=20, what="the first pages")
    return record, daemon


def second_run(state: Path) -> tuple[Recorder, Recorder, Daemon]:
    record, held = Recorder(), Recorder()
    daemon = _daemon(state, {"record": record, "held": held})
    daemon.dispatcher.start()
    for _ in range(3):
        daemon.poll_cluster("c")
    wait_for(lambda: daemon.outbox.pending() == 0, timeout=30, what="the queued deliveries")
    return record, held, daemon


def _sql(state: Path, *statements: str) -> None:
    db = sqlite3.connect(state / "state.db")
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def _foreign(state: Path) -> None:
    (state / "state.db").unlink()
    _sql(state, "CREATE TABLE foo (x)", "INSERT INTO foo VALUES (1)")


def _garbage_wal(state: Path) -> None:
    (state / "state.db-wal").write_bytes(os.urandom(8192))


def _corrupt_page(state: Path) -> None:
    """Bytes of an index page overwritten, as a bad disk does: the integrity check fails."""
    db = sqlite3.connect(state / "state.db")
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_alerts_1'").fetchone()
    db.close()
    with open(state / "state.db", "r+b") as f:
        f.seek((root - 1) * page_size)  # its header: a page of no known type
        f.write(b"\xff" * 16)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "outbox dropped": lambda s: _sql(s, "DROP TABLE outbox"),
    "alert_groups dropped": lambda s: _sql(s, "DROP TABLE alert_groups"),
    "meta dropped": lambda s: _sql(s, "DROP TABLE meta"),
    "every table dropped": lambda s: _sql(
        s, *(f"DROP TABLE {t}" for t in ("meta", "alerts", "alert_groups", "storms", "silences", "outbox", "refs"))
    ),
    "a foreign SQLite file": _foreign,
    "alerts of other columns": lambda s: _sql(s, "DROP TABLE alerts", "CREATE TABLE alerts (id, data, extra)"),
    "a column dropped from outbox": lambda s: _sql(s, "ALTER TABLE outbox DROP COLUMN last_error"),
    "a page overwritten": _corrupt_page,
    "truncated to nothing": lambda s: (s / "state.db").write_bytes(b""),
    "a garbage write-ahead log": _garbage_wal,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_found_at_start_is_said_once_and_loses_nothing(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    record, daemon = first_run(tmp_path)
    daemon.stop()  # clean: state.db.last-good is the state as it was
    issued = _ids(record.sent) | {int(d.notification.id) for d in daemon.outbox.deliveries}
    DAMAGE[damage](tmp_path)
    caplog.clear()
    caplog.set_level(logging.INFO)
    record_again, held, again = second_run(tmp_path)
    try:
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("state damaged:")]
        assert len(said) == 1, said
        assert "starting from the last good copy" in said[0] or damage == "a garbage write-ahead log"
        if damage != "truncated to nothing":  # an empty file holds nothing to inspect
            assert list(tmp_path.glob("state.db.set-aside-*")), "the damaged file is kept for inspection"
        # Nothing announced twice, nothing lost, no id issued again.
        assert [n for n in record_again.sent if n.kind == "firing"] == []
        assert sorted(n.group_labels["group"] for n in held.sent if n.kind == "firing") == list(STUCK)
        new = _ids(record_again.sent + held.sent) - issued
        assert not new or min(new) > max(issued)
        notes = health.state_notes(again.store.db)
        assert notes and notes[0].startswith("state damaged at start:")
        assert b"lagwatch_state_damage_found_total 1" in _metrics(again)
    finally:
        again.stop()


def _metrics(daemon: Daemon) -> bytes:
    daemon.render_metrics()
    return daemon.metrics_body()


def test_damage_without_a_last_good_copy_starts_empty_and_never_reuses_an_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record, daemon = first_run(tmp_path)
    daemon.stop()
    issued = _ids(record.sent) | {int(d.notification.id) for d in daemon.outbox.deliveries}
    (tmp_path / "state.db.last-good").unlink()
    DAMAGE["every table dropped"](tmp_path)
    caplog.set_level(logging.INFO)
    record_again, held, again = second_run(tmp_path)
    again.stop()
    (said,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("state damaged:")]
    assert "starting from nothing" in said
    assert min(_ids(record_again.sent + held.sent)) > max(issued)  # the sequence went on past every old id


@pytest.mark.parametrize(
    "row",
    [
        "UPDATE alerts SET body = json_set(body, '$.labels', json('[1, 2]')) WHERE key = (SELECT min(key) FROM alerts)",
        "UPDATE meta SET value = 'abc' WHERE name = 'sequence'",
        "UPDATE outbox SET attempts = 'abc' WHERE id = (SELECT min(id) FROM outbox)",
        'INSERT INTO silences VALUES (\'s1\', json(\'{"id": "s1", "matchers": {"group": "("}, '
        '"ends_at": 4102444800.0, "created_by": "api"}\'))',
    ],
    ids=["labels a list", "sequence not a number", "attempts text", "silence regex broken"],
)
def test_a_row_of_another_shape_is_set_aside_alone_and_the_daemon_goes_on(
    tmp_path: Path, row: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each crash-looped the daemon (a traceback at start), froze every poll (the silence) or stopped a
    receiver's worker (attempts): now the row is set aside, said, and the rest works."""
    record, daemon = first_run(tmp_path)
    daemon.stop()
    issued = _ids(record.sent) | {int(d.notification.id) for d in daemon.outbox.deliveries}
    _sql(tmp_path, row)
    caplog.set_level(logging.INFO)
    record_again, held, again = second_run(tmp_path)
    try:
        aside = again.store.db.db.execute("SELECT tbl FROM set_aside").fetchall()
        assert len(aside) == 1
        assert again.store.db.rows_set_aside == 1
        assert any("set aside" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
        assert not [r for r in caplog.records if r.exc_info]  # never a traceback
        assert all(rt.last_success is not None for rt in again.clusters.values())  # polls go on
        new = _ids(record_again.sent + held.sent) - issued
        assert not new or min(new) > max(issued)
        # Nothing lost: a queued notification set aside is decided again by the book, and sent.
        assert {n.group_labels["group"] for n in held.sent} == set(STUCK)
    finally:
        again.stop()


def test_a_read_only_state_volume_alerts_from_memory_and_saves_once_writable(tmp_path: Path) -> None:
    """`lagwatch run` on a read-only volume exited 1, though the README says it alerts from memory."""
    state = tmp_path / "state"
    state.mkdir()
    _mount(state, "ro")
    try:
        Polls.start = time.time() - 3600
        record = Recorder()
        daemon = _daemon(state, {"record": record})
        daemon.dispatcher.start()
        for _ in range(5):
            daemon.poll_cluster("c")
        wait_for(lambda: len(record.sent) == len(STUCK), timeout=20, what="pages from memory")
        assert daemon.store.db.read_only and daemon.state_owed()
        assert "running from memory" in " ".join(health.state_notes(daemon.store.db))
        assert b"lagwatch_state_writable 0" in _metrics(daemon)
        _mount(state, "remount,rw")
        daemon.poll_cluster("c")
        assert not daemon.store.db.read_only and not daemon.state_owed()
        daemon.stop()
        again = _daemon(state, {"record": Recorder()})
        assert {a.group for a in again.book.alerts.values()} == set(STUCK)  # saved once it could be
        again.stop()
    finally:
        os.system(f"umount {state} 2>/dev/null")


def _mount(path: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only volume needs root")
    if os.system(f"mount -t tmpfs -o {options},size=8m tmpfs {path}") != 0:
        pytest.skip("cannot mount tmpfs here")


def test_a_second_daemon_cannot_start_on_a_state_directory_made_again(tmp_path: Path) -> None:
    """The directory deleted while A runs, then B started on the same path before A made it again: both ran,
    both notified, and each moved the other's state.db aside every few seconds."""
    from lagwatch.state import StateLockedError

    state = tmp_path / "state"
    _, daemon = first_run(state)
    try:
        shutil.rmtree(state)
        with pytest.raises(StateLockedError, match="in use by another lagwatch process"):
            _daemon(state, {"record": Recorder()})
        daemon.poll_cluster("c")  # A makes it again and writes its whole state
        assert {a.group for a in daemon.book.alerts.values()} == set(STUCK)
        assert len(list(state.glob("state.db.set-aside-*"))) == 0
    finally:
        daemon.stop()


def test_slack_finds_the_message_of_an_incident_the_lost_state_had_announced(tmp_path: Path) -> None:
    """No last good copy: the incident still firing is found in Slack by its group and its message updated, not
    announced again as new."""
    from lagwatch.notify.settings import SlackConfig
    from lagwatch.notify.slack import SlackNotifier

    slack = FakeSlack().start()
    Polls.start = time.time() - 3600
    try:

        def notifier() -> SlackNotifier:
            config = {"token": slack.token, "base_url": slack.base_url, "default_channel": "#kafka"}
            return SlackNotifier("slack", SlackConfig.model_validate(config))

        daemon = _daemon(tmp_path, {"slack": notifier()})
        daemon.dispatcher.start()
        for _ in range(5):
            daemon.poll_cluster("c")
        wait_for(lambda: len(slack.delivered("chat.postMessage")) == len(STUCK), timeout=30, what="posts")
        daemon.stop()
        (tmp_path / "state.db.last-good").unlink()
        DAMAGE["every table dropped"](tmp_path)
        again = _daemon(tmp_path, {"slack": notifier()})
        again.dispatcher.start()
        for _ in range(5):
            again.poll_cluster("c")
        wait_for(lambda: again.outbox.pending() == 0, timeout=60, what="deliveries")
        again.stop()
        posts = [c for c in slack.delivered("chat.postMessage") if not c.args.get("thread_ts")]
        assert len(posts) == len(STUCK)  # not one more: each incident announced once
        assert len(slack.delivered("chat.update")) == len(STUCK)  # each message brought up to date
    finally:
        slack.stop()
