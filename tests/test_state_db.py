"""The state database: small writes, failures that lose nothing, damaged or newer state set aside, never a crash."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lagwatch.alerts import AlertBook, AlertsConfig, Receiver
from lagwatch.errors import LagwatchError
from lagwatch.model import Finding, Severity
from lagwatch.notify import Outbox
from lagwatch.state import StateLockedError, StateStore


def finding(group: str, rule: str = "lag", severity: str = "warning") -> Finding:
    return Finding(rule, severity, "c", group, {"cluster": "c", "group": group}, f"{group} {rule}", {"lag": 5})


def book_with(groups: int, receivers: tuple[Receiver, ...] = (Receiver("log"),)) -> AlertBook:
    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0, storm_threshold=10**6), receivers=receivers)
    book.apply("c", [finding(f"g{i}") for i in range(groups)], frozenset(), 0.0)
    return book


def test_a_delivery_writes_one_row_not_the_whole_state(tmp_path: Path) -> None:
    store = StateStore(tmp_path).open()
    book, outbox = book_with(1000), Outbox()
    notes = book.due(0.0)
    outbox.add(notes, ["log"])
    first = store.save_alerts(book, outbox)
    assert first == 1000 + 1000 + 1000 + 1  # alerts, groups, queued notifications, and the notification sequence
    delivery = outbox.due(1.0, "log")[0]
    outbox.done(delivery, {"ts": "1"})
    assert store.save_alerts(None, outbox) == 2  # the delivered row goes, its reference comes
    # The next poll changes the figures of every alert, not their state: nothing to write.
    book.apply("c", [finding(f"g{i}") for i in range(1000)], frozenset(), 5.0)
    assert store.save_alerts(book, outbox) == 0
    store.close()
    again = StateStore(tmp_path).open()
    raw = again.read_alerts()
    restored = AlertBook.from_json(AlertsConfig(), raw["book"], (Receiver("log"),))
    assert len(restored.alerts) == 1000 and len(Outbox.from_json(raw["outbox"]).deliveries) == 999
    # After a restart, what was read counts as written: the same state saves nothing, one change one row.
    outbox = Outbox.from_json(raw["outbox"])
    assert again.save_alerts(restored, outbox) == 0
    next(iter(restored.alerts.values())).state = "resolved"
    assert again.save_alerts(restored, outbox) == 1
    again.close()


def test_rows_compared_by_fingerprint_write_each_change_once_and_nothing_after_a_restart(tmp_path: Path) -> None:
    """Alert groups and storms are compared with what was written by a fingerprint of their fields, not their JSON:
    a restart reads them back as written (a save of the same state writes nothing), and any change of a field is
    one row written."""
    store = StateStore(tmp_path).open()
    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0, storm_threshold=5), receivers=(Receiver("log"),))
    book.apply("c", [finding(f"g{i}") for i in range(20)], frozenset(), 0.0)
    outbox = Outbox()
    outbox.add(book.due(0.0), ["log"])
    assert len(book.storms) == 1 and all(g.storm for g in book.groups.values())  # the storm path, with its rows
    assert store.save_alerts(book, outbox) > 0
    assert store.save_alerts(book, outbox) == 0
    store.close()
    again = StateStore(tmp_path).open()
    raw = again.read_alerts()
    restored = AlertBook.from_json(AlertsConfig(storm_threshold=5), raw["book"], (Receiver("log"),))
    outbox = Outbox.from_json(raw["outbox"])
    assert len(restored.groups) == 20 and len(restored.storms) == 1
    assert again.save_alerts(restored, outbox) == 0
    group = restored.groups["cluster=c|group=g3"]
    for change in (
        lambda: group.set_last_notified("log", 99.0),
        lambda: group.told("log").update({"lag|x": Severity.CRITICAL}),  # type: ignore[union-attr]
        lambda: group.labels.update(team="a"),
        lambda: group.set_storm("log", "storm|log|other"),
        lambda: next(iter(restored.storms.values())).members.pop("cluster=c|group=g4"),
    ):
        change()
        assert again.save_alerts(restored, outbox) == 1
        assert again.save_alerts(restored, outbox) == 0
    again.close()
    rows = dict(sqlite3.connect(tmp_path / "state.db").execute("SELECT key, body FROM alert_groups"))
    assert json.loads(rows["cluster=c|group=g3"]) == {
        "key": "cluster=c|group=g3",
        "labels": {"cluster": "c", "group": "g3", "team": "a"},
        "notified": {"log": {"lag|cluster=c|group=g3": "warning", "lag|x": "critical"}},
        "last_notified_at": {"log": 99.0},
        "storm": {"log": "storm|log|other"},
    }


def test_every_field_of_an_alert_group_is_in_its_fingerprint() -> None:
    """A field of the saved row left out of the state's fingerprint would never be saved when it alone changed."""
    from dataclasses import fields

    from lagwatch.alerts.groups import AlertGroup, AlertGroupRow

    def group() -> AlertGroup:
        return AlertGroup("k", {"cluster": "c"}, {"r": {"a": Severity.WARNING}}, {"r": 1.0}, {"r": "storm|r|c"})

    base = group()
    assert group().fingerprint() == base.fingerprint() and vars(group()) == vars(base)
    assert list(vars(base)) == [f.name for f in fields(AlertGroupRow)]
    for f in fields(AlertGroupRow):
        row = vars(group())
        value = row[f.name]
        row[f.name] = "k2" if isinstance(value, str) else {**value, "other": next(iter(value.values()))}
        changed = AlertGroup(**row)
        assert vars(changed) == row and changed.fingerprint() != base.fingerprint(), f.name
    for change in (
        lambda g: g.set_told("r", None),
        lambda g: g.set_last_notified("r", 2.0),
        lambda g: g.set_storm("r2", "storm|r2|c"),
        lambda g: g.story_ended("r"),
    ):
        g = group()
        change(g)
        assert g.fingerprint() != base.fingerprint()


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


def test_full_disk_loses_nothing_and_catches_up_when_it_heals(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "4m")
    try:
        store = StateStore(disk).open()
        book, outbox = book_with(10), Outbox()
        store.save_alerts(book, outbox)
        filler = disk / "filler"
        with open(filler, "wb") as f:  # fill the disk to the last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        book.apply("c", [finding(f"g{i}") for i in range(400)], frozenset(), 10.0)  # a storm of new alerts
        outbox.add(book.due(10.0), ["log"])
        with pytest.raises((sqlite3.Error, OSError)):
            store.save_alerts(book, outbox)
        assert len(book.alerts) == 400 and outbox.pending() == 400  # memory is still the truth
        filler.unlink()
        assert store.save_alerts(book, outbox) > 0  # everything owed, at once
        store.close()
        raw = StateStore(disk).open().read_alerts()
        assert len(raw["book"]["alerts"]) == 400 and len(raw["outbox"]["deliveries"]) == 400
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_row_of_another_shape_is_set_aside_and_the_rest_loads(tmp_path: Path) -> None:
    store = StateStore(tmp_path).open()
    book, outbox = book_with(3), Outbox()
    store.save_alerts(book, outbox)
    store.db.db.execute(
        "UPDATE alerts SET body = ? WHERE key = ?", ('{"key": "x", "from_the_future": 1}', "lag|cluster=c|group=g1")
    )
    store.db.db.execute("UPDATE alerts SET body = 'null' WHERE key = ?", ("lag|cluster=c|group=g2",))
    store.close()
    again = StateStore(tmp_path).open()
    raw = again.read_alerts()
    assert len(raw["book"]["alerts"]) == 2  # 'null' was set aside as it was read
    aside = again.db.db.execute("SELECT tbl, key FROM set_aside").fetchall()
    assert ("alerts", "lag|cluster=c|group=g2") in aside
    again.close()


def test_daemon_starts_on_damaged_newer_or_odd_state(tmp_path: Path) -> None:
    """A garbage file, a database from a newer lagwatch, alerts.json of another shape: one log line each, a
    running daemon, and the last good copy used where there is one."""
    good = tmp_path / "good"
    store = StateStore(good).open()
    store.save_alerts(book_with(2), Outbox())
    store.close()  # leaves state.db.last-good
    (good / "state.db").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (good / f"state.db{suffix}").unlink(missing_ok=True)
    store = StateStore(good).open()
    assert len(store.read_alerts()["book"]["alerts"]) == 2  # restored from the last good copy
    assert list(good.glob("state.db.set-aside-*"))
    store.close()

    newer = tmp_path / "newer"
    newer.mkdir()
    db = sqlite3.connect(newer / "state.db")
    db.execute("PRAGMA user_version=99")
    db.close()
    store = StateStore(newer).open()
    assert store.read_alerts()["book"]["alerts"] == [] and list(newer.glob("state.db.set-aside-*"))
    store.close()

    for name, content in (
        ("list", "[]"),
        ("null", "null"),
        ("shape", json.dumps({"book": {"alerts": [{"key": "k", "extra": 1}]}})),
    ):
        odd = tmp_path / name
        odd.mkdir()
        (odd / "alerts.json").write_text(content)
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            f"state_dir: {odd}\nhttp: {{enabled: false}}\n"
            "clusters: {x: {bootstrap_servers: '127.0.0.1:1', poll_interval_s: 1, request_timeout_s: 1, exact_clocks: false}}\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "lagwatch", "run", "--config", str(config), "--log-format", "json"],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=4)  # still running: no crash loop
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        if name == "shape":
            assert "unknown shape" in err and (odd / "alerts.json.imported").exists()


def _fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass


def test_a_full_disk_at_start_reads_the_saved_state_and_writes_once_space_returns(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "1m")
    try:
        store = StateStore(disk).open()
        book, outbox = book_with(3), Outbox()
        outbox.add(book.due(0.0), ["log"])
        store.save_alerts(book, outbox)
        store.close()
        filler = disk / "filler"
        _fill(filler)
        # SQLite writes even to open a database: before, lagwatch refused to start on a full disk.
        again = StateStore(disk).open()
        assert again.db.read_only
        raw = again.read_alerts()
        assert len(raw["book"]["alerts"]) == 3 and len(raw["outbox"]["deliveries"]) == 3
        restored = Outbox.from_json(raw["outbox"])
        assert again.save_alerts(None, restored) == 0  # nothing changed: nothing to write, no error
        restored.done(restored.deliveries[0], {"ts": "1"})
        with pytest.raises(sqlite3.Error):
            again.save_alerts(None, restored)  # the disk still refuses
        filler.unlink()
        assert again.save_alerts(None, restored) == 2  # writable again: the delivered row goes, its reference comes
        assert not again.db.read_only
        again.close()
        final = StateStore(disk).open()
        assert len(final.read_alerts()["outbox"]["deliveries"]) == 2
        final.close()
        empty = disk / "empty"
        empty.mkdir()
        _fill(filler)
        with pytest.raises(LagwatchError, match=r"cannot open state\.db"):  # nothing saved there: nothing to read
            StateStore(empty).open()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_save_after_a_delivery_costs_the_same_at_10000_queued_as_at_10(tmp_path: Path) -> None:
    """The save after a delivery writes that delivery's rows, whatever the queue: the drain of 10,000 queued
    notifications was held to a tenth of Slack's rate by saves comparing the whole outbox each time."""
    import time

    store = StateStore(tmp_path).open()
    book, outbox = book_with(10_000), Outbox()
    outbox.add(book.due(0.0), ["log", "slack"])
    store.save_alerts(book, outbox)
    timings = []
    for delivery in outbox.due(1.0, "slack")[:50]:
        delivery.in_flight = True
        outbox.touch(delivery)
        t0 = time.perf_counter()
        assert store.save_alerts(None, outbox) == 1  # the in-flight mark only
        outbox.done(delivery, {"ts": delivery.notification.id})
        assert store.save_alerts(None, outbox) == 2  # the delivered row goes, its reference comes
        timings.append(time.perf_counter() - t0)
    assert sorted(timings)[len(timings) // 2] < 0.01, timings  # 38 ms each before, at 10,000 queued
    store.close()


def test_saves_after_deliveries_leave_on_disk_what_is_in_memory(tmp_path: Path) -> None:
    """Deliveries added, retried, marked in flight, delivered, collapsed as stale; saved after each step, with the
    book or without (a delivery's save): a restart reads the outbox memory holds, row for row."""
    import random

    rng = random.Random(7)
    store = StateStore(tmp_path).open()
    book, outbox = book_with(40), Outbox()
    outbox.add(book.due(0.0), ["log", "slack"])
    for step in range(300):
        queued = outbox.deliveries
        action = rng.choice(["deliver", "retry", "flight", "save_book", "resolve"])
        if action == "deliver" and queued:
            d = rng.choice(queued)
            outbox.done(d, {"ts": str(step)} if d.notification.kind != "resolved" else None)
        elif action in ("retry", "flight") and queued:
            d = rng.choice(queued)
            if action == "retry":
                d.attempts, d.next_attempt_at, d.last_error = d.attempts + 1, float(step), f"error {step}"
            else:
                d.in_flight = not d.in_flight
            outbox.touch(d)
        elif action == "resolve":
            book.apply("c", [finding(f"g{i}") for i in range(rng.randrange(40))], frozenset(), float(step))
            outbox.add(book.due(float(step)), ["log", "slack"])
        store.save_alerts(book if action == "save_book" else None, outbox)
        assert _on_disk(tmp_path) == _in_memory(outbox), (step, action)
    store.close()
    again = StateStore(tmp_path).open()
    restored = Outbox.from_json(again.read_alerts()["outbox"])
    again.close()

    def rows(o: Outbox) -> tuple[object, ...]:
        return sorted(json.dumps(d.to_json(), sort_keys=True) for d in o.deliveries), o.refs

    assert rows(restored) == rows(outbox)


def _on_disk(state: Path) -> tuple[object, ...]:
    with sqlite3.connect(state / "state.db") as db:
        queued = set(db.execute("SELECT id, attempts, next_attempt_at, last_error, in_flight FROM outbox"))
        refs = {k: json.loads(b) for k, b in db.execute("SELECT key, body FROM refs")}
    return queued, refs


def _in_memory(outbox: Outbox) -> tuple[object, ...]:
    queued = {
        (Outbox.row_key(d), d.attempts, d.next_attempt_at, d.last_error, int(d.in_flight)) for d in outbox.deliveries
    }
    return queued, outbox.refs


def test_one_queued_notification_of_another_shape_is_set_aside_alone(tmp_path: Path) -> None:
    """A delivery row a newer lagwatch wrote (one more field) is set aside on its own: the other queued
    notifications are still delivered, and the group whose notification was set aside is announced again."""
    from tests.serve_fakes import make_daemon

    class Quiet:
        name = "quiet"

        def send(self, notification: object, ref: object) -> None:
            return None

    daemon = make_daemon(tmp_path, notifiers={"quiet": Quiet()}, alerts={"group_wait_s": 0})
    with daemon.book_lock:
        daemon.book.apply("c", [finding(f"g{i}") for i in range(5)], frozenset(), 1000.0)
        daemon._flush(1000.0)
    assert daemon.outbox.pending() == 5
    daemon.stop()
    db = sqlite3.connect(tmp_path / "state.db")
    key, body = db.execute("SELECT id, body FROM outbox ORDER BY id LIMIT 1").fetchone()
    odd = json.loads(body)
    odd["priority"] = "high"
    db.execute("UPDATE outbox SET body = ? WHERE id = ?", (json.dumps(odd), key))
    db.commit()
    db.close()
    again = make_daemon(tmp_path, notifiers={"quiet": Quiet()}, alerts={"group_wait_s": 0})
    try:
        assert again.outbox.pending() == 4
        assert [k for (k,) in again.store.db.db.execute("SELECT key FROM set_aside WHERE tbl = 'outbox'")] == [key]
        with again.book_lock:
            again._flush(1001.0)  # never delivered: announced again, but after group_interval (300 s), not at once
        assert again.outbox.pending() == 4
        with again.book_lock:
            again._flush(1301.0)
        assert again.outbox.pending() == 5
        groups = sorted(d.notification.group_labels["group"] for d in again.outbox.deliveries)
        assert groups == [f"g{i}" for i in range(5)]
    finally:
        again.stop()


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_a_state_database_deleted_or_emptied_starts_from_the_last_good_copy(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite takes a missing or empty file for a new database: every incident announced before was announced
    again, and resolves owed were lost, without a word. The last good copy is used, with one line."""
    store = StateStore(tmp_path).open()
    store.save_alerts(book_with(2), Outbox())
    store.close()  # leaves state.db.last-good
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"state.db{suffix}").unlink(missing_ok=True)
    if damage == "deleted":
        (tmp_path / "state.db").unlink()
    else:
        (tmp_path / "state.db").write_bytes(b"")
    store = StateStore(tmp_path).open()
    assert len(store.read_alerts()["book"]["alerts"]) == 2
    store.close()
    (line,) = [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "ERROR")]  # one line
    assert line.startswith("state damaged: state database missing or empty; starting from the last good copy, saved")


def test_a_deleted_lock_file_does_not_let_a_second_daemon_in(tmp_path: Path) -> None:
    """A clean-up that deleted `lock` let a second daemon open the same state database: both sent everything."""
    first = StateStore(tmp_path).open()
    (tmp_path / "lock").unlink()
    with pytest.raises(LagwatchError, match="in use by another lagwatch process"):
        StateStore(tmp_path).open()
    first.close()
    StateStore(tmp_path).open().close()  # free again once the first is gone


@pytest.mark.parametrize("last_good", [True, False])
def test_a_state_database_deleted_after_a_crash_starts_from_the_last_good_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, last_good: bool
) -> None:
    """After a SIGKILL the write-ahead log is left beside the database; with the database deleted, the log alone
    was taken for state to read, and lagwatch started from nothing without a word. The last good copy is used,
    and the orphaned log kept aside (also without a copy: then lagwatch starts empty, and says so)."""
    if last_good:
        store = StateStore(tmp_path).open()
        store.save_alerts(book_with(2), Outbox())
        store.close()  # leaves state.db.last-good with 2 alerts
    crash = "\n".join(
        [
            "import os, sys",
            "sys.path.insert(0, sys.argv[2])",
            "from pathlib import Path",
            "from lagwatch.notify import Outbox",
            "from lagwatch.state import StateStore",
            "from tests.test_state_db import book_with",
            "store = StateStore(Path(sys.argv[1])).open()",
            "store.save_alerts(book_with(3), Outbox())",
            "os._exit(0)",  # as a SIGKILL: no checkpoint, no last-good copy
        ]
    )
    subprocess.run([sys.executable, "-c", crash, str(tmp_path), str(Path(__file__).parent.parent)], check=True)
    assert (tmp_path / "state.db-wal").stat().st_size > 0
    (tmp_path / "state.db").unlink()
    store = StateStore(tmp_path).open()
    assert len(store.read_alerts()["book"]["alerts"]) == (2 if last_good else 0)
    store.close()
    assert "state database missing or empty" in caplog.text
    assert ("last good copy" in caplog.text) == last_good
    assert list(tmp_path.glob("state.db.set-aside-*-wal"))


def test_a_directory_in_place_of_the_state_database_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()
    with pytest.raises(LagwatchError, match=r"cannot open state\.db"):
        StateStore(tmp_path).open()


def test_a_state_directory_that_cannot_be_read_is_locked_by_its_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that can be written but not read (mode 0333, not root) cannot be opened to be locked: it started
    before the directory lock, and must still (a traceback said otherwise)."""
    import os

    real_open = os.open

    def refuse_directories(path: object, flags: int, *args: object) -> int:
        if flags & os.O_DIRECTORY:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse_directories)
    store = StateStore(tmp_path).open()
    with pytest.raises(LagwatchError, match="in use by another lagwatch process"):
        StateStore(tmp_path).open()
    store.close()


@pytest.mark.parametrize("target_dir", ["there", "gone"])
def test_a_state_database_symlink_whose_target_is_gone_starts_from_the_last_good_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, target_dir: str
) -> None:
    """state.db linked into a data volume that came up empty: SQLite created an empty database at the target (every
    incident announced again), or failed with its directory gone, although a last good copy was there."""
    state, volume = tmp_path / "state", tmp_path / "volume"
    volume.mkdir()
    store = StateStore(state).open()
    store.save_alerts(book_with(2), Outbox())
    store.close()
    (state / "state.db").unlink()
    (state / "state.db").symlink_to(volume / "state.db")
    if target_dir == "gone":
        volume.rmdir()
    store = StateStore(state).open()
    assert len(store.read_alerts()["book"]["alerts"]) == 2
    store.close()
    assert "starting from the last good copy" in caplog.text


@pytest.mark.parametrize("how", ["deleted", "deleted with its log", "replaced"])
def test_a_state_database_deleted_while_running_is_written_again_whole(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """state.db deleted (or replaced) while lagwatch runs: SQLite went on writing a file no longer there, nothing
    said so, and a crash then started from the last good copy: every incident since announced again. The next save
    notices, and writes everything to a new database: a crash right after it loses nothing."""
    store = StateStore(tmp_path).open()
    book, outbox = book_with(3), Outbox()
    outbox.add(book.due(0.0), ["log"])
    store.save_alerts(book, outbox)
    doomed = ["state.db", "state.db-wal", "state.db-shm"] if how == "deleted with its log" else ["state.db"]
    for name in doomed:
        (tmp_path / name).unlink(missing_ok=True)
    if how == "replaced":
        (tmp_path / "state.db").write_bytes(b"someone else's file")
    delivery = outbox.due(1.0, "log")[0]
    outbox.done(delivery, {"ts": "1"})
    store.save_alerts(None, outbox)  # after a delivery: the whole outbox to the new file at once
    assert store.db.replaced == 1 and "deleted or replaced while lagwatch runs" in caplog.text
    book.apply("c", [finding(f"g{i}") for i in range(4)], frozenset(), 5.0)  # a new alert since
    store.save_alerts(book, outbox)  # the next poll's save: the book too
    crashed = StateStore(tmp_path)  # another process, as after a crash: reads what is on disk now
    store.db._db.close()  # type: ignore[union-attr]  # the crash: no clean stop, no last-good copy
    store.db._db = None
    store.close()
    raw = crashed.open().read_alerts()
    crashed.close()
    assert len(raw["book"]["alerts"]) == 4 and len(raw["book"]["groups"]) == 3
    assert len(raw["outbox"]["deliveries"]) == 2 and raw["outbox"]["refs"] == {
        "log|" + delivery.notification.group_key: {"ts": "1"}
    }
    if how == "replaced":
        aside = [p for p in tmp_path.glob("state.db.set-aside-*") if not p.name.endswith(("-wal", "-shm"))]
        assert [p.read_bytes() for p in aside] == [b"someone else's file"]


def test_notification_ids_are_never_issued_twice_after_a_restore_from_the_last_good_copy(tmp_path: Path) -> None:
    """Restored from the last good copy, the sequence went back to that copy's, and new notifications took ids the
    last run had already sent: a receiver that takes each id once dropped them. They now start past any id."""
    from lagwatch.config import load_settings
    from lagwatch.daemon import Daemon

    store = StateStore(tmp_path).open()
    book = book_with(1)
    store.save_alerts(book, Outbox())
    store.close()  # the last good copy: sequence 0
    store = StateStore(tmp_path).open()
    book.due(0.0)  # the last run went on, issuing id 00000001...
    store.save_alerts(book, Outbox())
    store.db._db.close()  # type: ignore[union-attr]  # ...and died
    store.db._db = None
    store.close()
    (tmp_path / "state.db").unlink()  # and its database was lost
    daemon = Daemon(load_settings(state_dir=tmp_path, http={"enabled": False}), clusters={}, notifiers={})
    try:
        assert daemon.store.db.restored_from_copy and daemon.book.sequence > 10**9
    finally:
        daemon.stop()


def test_the_whole_state_directory_deleted_while_running_is_made_again(tmp_path: Path) -> None:
    """`rm -rf state_dir` while lagwatch runs: the new database could not be made in a directory that was gone, the
    connection was left closed, and every poll failed with 'state database is closed' behind a green /healthz. The
    directory is made again, and the whole state written to it; while it cannot be (a file in its place), a save
    fails as a full disk does (OSError: counted, alerting from memory), and the next one tries again. The new
    directory is locked as the first was."""
    import shutil

    state = tmp_path / "state"
    store = StateStore(state).open()
    book, outbox = book_with(2), Outbox()
    store.save_alerts(book, outbox)
    shutil.rmtree(state)
    state.write_text("in the way")  # the directory cannot be made yet
    with pytest.raises(OSError):
        store.save_alerts(book, outbox)
    with pytest.raises(OSError):
        store.save_alerts(None, outbox)  # a delivery's save: the same, never 'closed'
    state.unlink()
    store.save_alerts(book, outbox)  # made again, everything written
    # And locked again: the locks held were on the deleted directory, and a second daemon started on the new one.
    with pytest.raises(StateLockedError):
        StateStore(state).open()
    store.db._db.close()  # type: ignore[union-attr]  # a crash
    store.db._db = None
    store.close()
    again = StateStore(state).open()
    assert len(again.read_alerts()["book"]["alerts"]) == 2
    again.close()


def test_a_run_that_did_not_stop_cleanly_is_known_at_the_next_start(tmp_path: Path) -> None:
    """Killed, or stopped with its last save failed: the next start knows what is on disk may be behind what was
    delivered (and the daemon then looks in Slack before posting what is queued)."""
    store = StateStore(tmp_path).open()
    assert not store.db.unclean_stop  # a new directory
    store.close()
    store = StateStore(tmp_path).open()
    assert not store.db.unclean_stop  # stopped cleanly
    store.close(clean=False)  # a stop whose last save failed
    store = StateStore(tmp_path).open()
    assert store.db.unclean_stop
    store.db._db.close()  # type: ignore[union-attr]  # killed: the mark of this run stays too
    store.db._db = None
    store.close()
    store = StateStore(tmp_path).open()
    assert store.db.unclean_stop
    store.close()
    store = StateStore(tmp_path).open()
    assert not store.db.unclean_stop
    store.close()
