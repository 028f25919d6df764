"""The state directory as one SQLite database (stdlib sqlite3, WAL): alerts, alert groups, storms, API silences, the
outbox and the notifiers' message references as rows, and each cluster's history as a versioned document.

Small transactions: a save writes only the rows whose durable content changed since the last save that reached
the disk (a delivery deletes one outbox row and upserts one reference), never the whole state. A save that fails
(disk full, read-only volume, too many open files) raises, and changes nothing that was known to be on disk: the
next save writes everything still owed. Memory stays the truth meanwhile, so alerting goes on. That holds from the
start too: a state directory that refuses writes when lagwatch starts (SQLite writes even to open) is read without
writing, and the first save that has something to write opens it for writing again, or fails and is counted.

Versions: `PRAGMA user_version` is the schema version. An older one is migrated; a newer one (written by a newer
lagwatch) or a damaged file is moved aside with one log line, and the last good copy (made at every clean stop) is
used if there is one. A damaged row is moved to `set_aside` and the others load.
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import os
import re
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lagwatch.alerts import AlertBook
from lagwatch.alerts.groups import AlertGroup
from lagwatch.errors import LagwatchError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
FILE = "state.db"
LAST_GOOD = "state.db.last-good"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS alerts (key TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS alert_groups (key TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS storms (key TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS silences (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
  id TEXT PRIMARY KEY, seq TEXT NOT NULL, notifier TEXT NOT NULL, body TEXT NOT NULL,
  attempts INTEGER NOT NULL, next_attempt_at REAL NOT NULL, last_error TEXT, in_flight INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS refs (key TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS history (cluster TEXT PRIMARY KEY, body TEXT NOT NULL, previous TEXT);
CREATE TABLE IF NOT EXISTS set_aside (at REAL NOT NULL, tbl TEXT NOT NULL, key TEXT NOT NULL, body TEXT, why TEXT);
"""

_ROW_TABLES = ("alerts", "alert_groups", "storms", "silences", "refs")
# Each table's columns as _SCHEMA makes them: a file whose tables differ (dropped, recreated with other columns) is
# damaged. Recreated empty without a word, a dropped `outbox` lost the queued deliveries and a dropped `meta`
# issued notification ids again from 00000001.
_COLUMNS = {
    m.group(1): [c.split()[0] for c in re.split(r",\s*(?![^()]*\))", m.group(2).strip()) if c.strip()]
    for m in re.finditer(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\);", _SCHEMA, re.S)
}


_KEY_COLUMN = {"silences": "id", "outbox": "id", "meta": "name"}


def _fingerprint(delivery: Any) -> str:
    """What of a queued delivery changes (its notification never does: written once, with the row)."""
    d = delivery
    return f"{d.attempts}|{d.next_attempt_at}|{d.last_error}|{d.in_flight}"


# One encoder, not json.dumps with options (which builds one per call): a third less per row, and a save after
# each poll encodes every alert group (10,000 in daemon_step_bench.py) to see which changed.
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


# What identifies an alert row's content: it is rewritten only when one of these changes (not its figures).
_ALERT_FINGERPRINT = ("state", "severity", "started_at", "fired_at", "resolved_at", "for_s")
_alert_fingerprint = operator.attrgetter(*_ALERT_FINGERPRINT)  # of an Alert; load_alerts reads the same from rows


def _group_row_fingerprint(row: dict[str, Any]) -> int | None:
    """The fingerprint of a group row as loaded, as the group made from it gives it (None: not of the current
    shape, so it is written again)."""
    try:
        group = AlertGroup(row["key"], row["labels"], row["notified"], row["last_notified_at"], row["storm"])
        return group.fingerprint()
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _flat_fingerprint(fields: Mapping[str, Any]) -> int:
    """Of a row whose fields are plain values and flat dicts (a storm's: its 100,000 members at 1M group-partitions
    were encoded after each poll to see whether it changed), by field name: a row as loaded gives the same."""
    return hash(tuple(sorted((k, tuple(v.items()) if isinstance(v, dict) else v) for k, v in fields.items())))


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path` (through a symlink), None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _structure_problem(db: sqlite3.Connection) -> str | None:
    """What differs from lagwatch's tables in a database of the current schema version, or None."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in _COLUMNS if t not in tables]
    if missing:
        return f"tables missing: {', '.join(missing)}"
    for table, expected in _COLUMNS.items():
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        if columns != expected:
            return f"table {table} has columns {', '.join(columns)}; expected {', '.join(expected)}"
    return None


_WAL_MAGIC = (0x377F0682, 0x377F0683)  # little- and big-endian checksums (SQLite's file format, section 4.1)


def _wal_header_problem(wal: Path) -> str | None:
    """A write-ahead log SQLite would skip without a word: a header of another magic or a checksum that fails.
    SQLite takes such a log for an empty one, so the saves it holds (the last deliveries) were lost silently."""
    try:
        with open(wal, "rb") as f:
            header = f.read(32)
    except OSError:
        return None
    if not header:
        return None
    if len(header) < 32:
        return "write-ahead log shorter than its header"
    magic = struct.unpack(">I", header[:4])[0]
    if magic not in _WAL_MAGIC:
        return "write-ahead log of an unknown format (not SQLite's)"
    words = struct.unpack((">" if magic & 1 else "<") + "6I", header[:24])
    s0 = s1 = 0
    for x0, x1 in zip(words[::2], words[1::2], strict=True):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    if (s0, s1) != struct.unpack(">2I", header[24:32]):
        return "write-ahead log header checksum fails"
    return None


class StateDatabase:
    def __init__(self, directory: Path, relock: Callable[[], None] | None = None) -> None:
        self.directory = directory
        # Locks a state directory made again (the whole directory deleted while lagwatch runs): without it, a
        # second daemon could take the new one and send everything a second time. Raises OSError when it cannot.
        self._relock = relock
        self.path = directory / FILE
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self.read_only = False  # opened without writing (the disk refused): the next write opens it again
        # What is known to be on disk, per table and key: the hash of what identifies the row's content as written
        # (its body, or a fingerprint of its fields: alerts, alert groups). Saves write only the difference. A hash,
        # not the body: the bodies of 100,000 alert groups with a receiver were 38 MB kept for the comparison. A
        # changed row whose hash is the same (about 2**-64: strings hash with a per-process random key; a tuple
        # with one field changed never does) would be left as it was on disk until its next change.
        self._written: dict[str, dict[str, int]] = {t: {} for t in (*_ROW_TABLES, "outbox")}
        self.writes = 0  # rows written or deleted, for the benchmark and the tests
        # The file the connection writes (device, inode): a state.db deleted or replaced while lagwatch runs is
        # noticed at the next save, and everything is written again to a new one (_heal_if_replaced).
        self._identity: tuple[int, int] | None = None
        self._dir_identity: tuple[int, int] | None = None  # the directory locked (StateStore); another is locked anew
        self.replaced = 0  # times that happened
        self.full_save_owed = False  # a new file has only what saves wrote since: the next save with the book all
        self._reopen_owed = False  # the file went, and a new one could not be made yet: every write tries again
        # The state came from a copy older than the last run's (the last good copy): notification ids it issued
        # since may come again, and the daemon moves the sequence past them.
        self.restored_from_copy = False
        # The last run did not stop cleanly (killed, or its last save failed): what it delivered after its last
        # save that reached the disk is not in this state, and a delivery it made may be made again.
        self.unclean_stop = False
        # Damage found at start (what, one line each), and whether the state in use is older than the last run's
        # (a copy, or nothing): the daemon then moves the notification sequence on and has Slack searched.
        self.damage: list[str] = []
        self.lost_state = False
        self.started_from: str | None = None
        self.rows_set_aside = 0  # rows of an unknown shape set aside (at start, or when the book found them)

    # -- opening --------------------------------------------------------------------------------------------------

    def open(self) -> StateDatabase:
        """Opens the state, checked first (lagwatch's tables and columns, `PRAGMA quick_check`, a write-ahead log
        SQLite would skip). Damage is never silent: the damaged file is kept aside, one error line says what was
        found and what lagwatch starts from (the last good copy, or nothing), and `damage` keeps it for /readyz
        and /metrics. Starting from a copy or from nothing, `lost_state` is set: the notification sequence moves
        past every id the lost state may have issued, and Slack is searched before a group's message is posted."""
        self._dir_identity = _identity(self.directory)
        wal = Path(f"{self.path}-wal")
        problem = _wal_header_problem(wal) if self.path.is_file() else None
        if problem is not None:
            # The database file itself is whole (SQLite checkpoints whole transactions into it): it is used
            # without the log, and what the log held (the last saves) is known to be missing.
            aside = self._move_aside(("-wal", "-shm"))
            self._damaged(f"{problem}; it is moved to {aside}-wal, and the saves it held are lost")
        if self._missing_or_empty():
            had_wal = wal.exists()
            if had_wal or self.lost_state or (self.directory / LAST_GOOD).is_file():
                # Deleted, or truncated to nothing (a failed copy, a full disk): SQLite takes an empty file for a
                # new database, and every incident announced before was announced again, every resolve owed lost.
                self.path.unlink(missing_ok=True)
                aside = self._move_aside(("-wal", "-shm"))  # a log without its database: nothing SQLite reads
                self._damaged(
                    "state database missing or empty"
                    + (f"; its write-ahead log is moved to {aside}-wal" if had_wal else "")
                )
                self._db = self._connect_last_good()
                self._identity = _identity(self.path)
                self._mark_running(self._db)
                return self
        try:
            self._db = self._connect(self.path)
        except sqlite3.OperationalError as e:
            # Disk full, read-only, no permission: the file may be fine. Never set it aside for that.
            self._db = self._connect_read_only(e)
        except (sqlite3.DatabaseError, _NewerSchemaError) as e:
            aside = self._move_aside(("", "-wal", "-shm"))
            self._damaged(f"state database unusable ({e}); it is moved to {aside}")
            self._db = self._connect_last_good()
        if self.damage and self.started_from is None:  # only the log was damaged: the file is used as it is
            self._say_damage("the database file without its log")
        self._identity = _identity(self.path)
        self.unclean_stop = self._db.execute("SELECT 1 FROM meta WHERE name = 'running'").fetchone() is not None
        if not self.read_only:
            self._mark_running(self._db)
        return self

    def _damaged(self, what: str) -> None:
        """Damage found at start: said once the start knows what it goes on from (see _connect_last_good)."""
        self.damage.append(what)
        self.lost_state = True

    @staticmethod
    def _mark_running(db: sqlite3.Connection) -> None:
        """A mark a clean stop takes away: found at the next start, it says the run before did not stop cleanly
        (SIGKILL, OOM, power loss, or a stop whose last save failed)."""
        db.execute("INSERT OR REPLACE INTO meta VALUES ('running', '1')")

    def _connect(self, path: Path) -> sqlite3.Connection:
        """The database at `path`, of lagwatch's schema (made in a new file). StateDamagedError when the file is
        not sound: the integrity check fails, its tables differ from lagwatch's, or it is another SQLite file."""
        wal = Path(f"{path}-wal")
        existing = _has_content(path) or _has_content(wal)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns: a delivery is never redone
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise _NewerSchemaError(f"schema version {version}, this lagwatch knows up to {SCHEMA_VERSION}")
            check = [row[0] for row in db.execute("PRAGMA quick_check")]
            if check != ["ok"]:
                raise StateDamagedError(f"integrity check: {'; '.join(check[:3])}")
            if version == SCHEMA_VERSION:
                problem = _structure_problem(db)
                if problem is not None:
                    raise StateDamagedError(problem)
            elif version == 0 and (existing or db.execute("SELECT 1 FROM sqlite_master").fetchone() is not None):
                # lagwatch sets the version with its tables: a file that held something without it is not ours
                raise StateDamagedError("not a lagwatch state database (no schema version)")
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except BaseException:
            db.close()
            raise
        return db

    def _connect_read_only(self, error: sqlite3.Error) -> sqlite3.Connection:
        """The saved state, read without writing anything: a full disk must not keep lagwatch from starting (a pod
        restarting on a full volume would never alert). SQLite's read-only mode needs a shared-memory file it may
        not be able to create; then the file alone is read, but only if the WAL holds nothing (it is never skipped:
        it may hold the last deliveries, and reading without them would send them again)."""
        cannot = LagwatchError(f"state_dir {str(self.directory)!r}: cannot open {FILE}: {error}")
        if not self.path.exists():
            # Nothing saved yet (a read-only or missing volume at the first start): lagwatch alerts all the same,
            # from memory, and the first save the disk takes makes the file (exited 1, though the README said so).
            self.read_only = True
            log.error(
                "state directory refuses writes (read-only or missing volume?): running without saving, alerting "
                "goes on from memory, saves are tried again",
                extra={"file": str(self.path), "error": str(error)},
            )
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            db.executescript(_SCHEMA)
            return db
        if not self.path.is_file():
            raise cannot from None  # a directory or a device in its place: said, never written over
        uri = self.path.resolve().as_uri()
        uris = [f"{uri}?mode=ro"]
        wal = Path(f"{self.path}-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            uris.append(f"{uri}?immutable=1")  # skips the WAL, which holds nothing
        for candidate in uris:
            db = sqlite3.connect(candidate, uri=True, isolation_level=None, check_same_thread=False, timeout=5)
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.Error:
                db.close()
                continue
            if version != SCHEMA_VERSION:  # an older schema needs a migration (a write), a newer one setting aside
                db.close()
                break
            self.read_only = True
            log.error(
                "state directory refuses writes (disk full or read-only?): the saved state is read, alerting goes "
                "on from memory, saves are tried again",
                extra={"file": str(self.path), "error": str(error)},
            )
            return db
        raise cannot from None

    def _writable(self) -> sqlite3.Connection:
        """The connection, opened for writing again first if it was opened read-only. Raises sqlite3.Error while
        the disk still refuses."""
        if self._reopen_owed:
            self._reopen()
        if self.read_only:
            self._claim_directory()
            db = self._connect(self.path)
            self._mark_running(db)
            self.db.close()
            self._db, self.read_only = db, False
            log.warning("state database writable again", extra={"file": str(self.path)})
        return self.db

    def _claim_directory(self) -> None:
        """The state directory, made if it is gone, and locked again if it is not the one locked (deleted and made
        again while lagwatch runs). OSError while it cannot be made, or another process holds it."""
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True)
        now = _identity(self.directory)
        if now != self._dir_identity and self._relock is not None:
            self._relock()
        self._dir_identity = now

    def _move_aside(self, suffixes: tuple[str, ...]) -> Path:
        """The state database's files with these suffixes moved aside, kept for inspection; returns the new name
        (without the suffix)."""
        aside = _unused(self.path.with_name(f"{FILE}.set-aside-{int(time.time())}"))
        for suffix in suffixes:
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                os.replace(source, Path(f"{aside}{suffix}"))
        return aside

    def _missing_or_empty(self) -> bool:
        """No database file (its write-ahead log alone is nothing SQLite reads), or an empty one whose log is empty
        too (SQLite would read a log's pages). Something else in its place (a directory) is not missing: opening
        it says what it is. A symlink whose target is gone is missing: SQLite would create an empty database there
        (or fail, its directory gone too), and the restored copy replaces the link with a file."""
        if not self.path.exists():  # also a symlink whose target is gone (a data volume come up empty)
            return True
        wal = Path(f"{self.path}-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            return False
        return self.path.is_file() and self.path.stat().st_size == 0

    def _connect_last_good(self) -> sqlite3.Connection:
        """After damage: the last good copy (made at the last clean stop) if it is sound, else a new database. One
        error line says what was found and what lagwatch goes on from."""
        last_good = self.directory / LAST_GOOD
        source = "nothing"
        if last_good.is_file():
            try:
                with (
                    contextlib.closing(sqlite3.connect(last_good)) as copy,
                    contextlib.closing(sqlite3.connect(self.path)) as target,
                ):
                    copy.backup(target)
                db = self._connect(self.path)
                self.restored_from_copy = True
                saved = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last_good.stat().st_mtime))
                source = f"the last good copy, saved at {saved}"
            except (sqlite3.DatabaseError, _NewerSchemaError) as e:
                aside = self._move_aside(("", "-wal", "-shm"))
                self.damage.append(f"the last good copy is unusable too ({e}); what it became is moved to {aside}")
        if source == "nothing":
            db = self._connect(self.path)
        self._say_damage(source)
        return db

    def _say_damage(self, source: str) -> None:
        """The one line that says what damage was found at start and what lagwatch goes on from."""
        self.started_from = source
        log.error(
            f"state damaged: {'; '.join(self.damage)}; starting from {source}: notification ids go on past the old "
            "ones, and Slack is searched for each group's message before one is posted",
            extra={"file": str(self.path)},
        )

    def close(self, keep_copy: bool = True, clean: bool = True) -> None:
        """`clean`: everything delivered is saved (a stop whose last save failed leaves the mark of a run that did
        not stop cleanly)."""
        with self._lock:
            if self._db is None:
                return
            if clean and not self.read_only:
                with contextlib.suppress(sqlite3.Error):  # a full disk: the mark stays, and says so next time
                    self._db.execute("DELETE FROM meta WHERE name = 'running'")
            if keep_copy and not self.read_only:  # read-only: the file is as it was, and the disk is full
                with contextlib.suppress(sqlite3.Error, OSError):
                    tmp = self.directory / f".{LAST_GOOD}.tmp"
                    with contextlib.closing(sqlite3.connect(tmp)) as target:
                        self._db.backup(target)
                    os.replace(tmp, self.directory / LAST_GOOD)
            self._db.close()
            self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            if self._reopen_owed:  # a write's failure (counted, tried again), not a stop
                raise OSError(f"state database {self.path} is gone and not made again yet")
            raise StateClosedError("state database is closed")
        return self._db

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._writable()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- alerts and outbox ----------------------------------------------------------------------------------------

    def load_alerts(self) -> dict[str, Any]:
        """Everything the alert book and the outbox need, as plain data (the shapes their from_json take)."""
        with self._lock:
            rows = {t: self._rows(t) for t in _ROW_TABLES}
            self._written["alerts"] = {
                k: hash(hash(tuple(a.get(field) for field in _ALERT_FINGERPRINT))) for k, a in rows["alerts"].items()
            }
            for k, g in rows["alert_groups"].items():
                fingerprint = _group_row_fingerprint(g)
                if fingerprint is not None:  # else the hash of its body: written again (or deleted) at the next save
                    self._written["alert_groups"][k] = hash(fingerprint)  # as saves keep it (hash of an int)
            for k, st in rows["storms"].items():
                with contextlib.suppress(TypeError):  # a list in it (another shape): written again
                    self._written["storms"][k] = hash(_flat_fingerprint(st))
            sequence = self.db.execute("SELECT value FROM meta WHERE name='sequence'").fetchone()
            issued = _number(sequence[0]) if sequence else 0
            if issued is None:  # notification ids issued again from 1 would be taken for old ones by receivers
                self._set_aside_row("meta", "sequence", sequence[0], "the notification sequence is not a number")
                self._damaged(f"notification sequence unreadable ({str(sequence[0])[:40]!r})")
            elif sequence:
                self._written["meta"] = {"sequence": hash(sequence[0])}
            deliveries = []
            for key, _seq, notifier, body, attempts, next_at, error, in_flight in self.db.execute(
                "SELECT id, seq, notifier, body, attempts, next_attempt_at, last_error, in_flight FROM outbox "
                "ORDER BY length(seq), seq, id"  # seq is zero-padded to 8 digits, and longer past 10^8
            ):
                notification = self._parse("outbox", key, body)
                if notification is not None:
                    self._written["outbox"][key] = hash(f"{attempts}|{next_at}|{error}|{bool(in_flight)}")
                    deliveries.append(
                        {
                            "notification": notification,
                            "notifier": notifier,
                            "attempts": attempts,
                            "next_attempt_at": next_at,
                            "last_error": error,
                            "in_flight": bool(in_flight),
                        }
                    )
        return {
            "book": {
                "sequence": issued or 0,
                "alerts": list(rows["alerts"].values()),
                "groups": list(rows["alert_groups"].values()),
                "storms": list(rows["storms"].values()),
                "silences": list(rows["silences"].values()),
            },
            "outbox": {"deliveries": deliveries, "refs": rows["refs"]},
        }

    def _rows(self, table: str) -> dict[str, Any]:
        out = {}
        column = "id" if table == "silences" else "key"
        for key, body in self.db.execute(f"SELECT {column}, body FROM {table}"):
            value = self._parse(table, key, body)
            if value is not None:
                out[key] = value
                self._written[table][key] = hash(body)
        return out

    def _parse(self, table: str, key: str, body: str) -> Any:
        try:
            value = json.loads(body)
            if not isinstance(value, dict):
                raise ValueError(f"a {type(value).__name__}, not an object")
            return value
        except ValueError as e:
            self._set_aside_row(table, key, body, str(e))
            return None

    def _set_aside_row(self, table: str, key: str, body: str | None, why: str) -> None:
        log.error("damaged state row set aside", extra={"table": table, "key": key, "error": why})
        self.rows_set_aside += 1
        with contextlib.suppress(sqlite3.Error), self._transaction() as db:
            db.execute("INSERT INTO set_aside VALUES (?, ?, ?, ?, ?)", (time.time(), table, key, body, why))
            db.execute(f"DELETE FROM {table} WHERE {_KEY_COLUMN.get(table, 'key')} = ?", (key,))

    def set_aside(self, table: str, key: str, why: str) -> None:
        """A row that loaded as JSON but not as lagwatch's data (another shape): kept for inspection, not used."""
        with self._lock:
            column = "id" if table in ("silences", "outbox") else "key"
            row = self.db.execute(f"SELECT body FROM {table} WHERE {column} = ?", (key,)).fetchone()
        self._set_aside_row(table, key, row[0] if row else None, why)
        self._written[table].pop(key, None)

    def sequence_moved_at_start(self, sequence: int) -> None:
        """The notification sequence as the start moved it past the clock (alerts.restart), taken as written: a
        start with nothing else to save writes nothing (on a full disk every start was unready for it alone), and a
        crash before the next save loses nothing, as the next start moves it past the clock again."""
        with self._lock:
            self._written.setdefault("meta", {})["sequence"] = hash(str(sequence))

    def save(
        self, book: AlertBook | None, outbox: Any, figures: bool = False, groups: Mapping[str, Any] | None = None
    ) -> int:
        """Writes what changed since the last successful save: the book's rows (when given) and the outbox.
        Returns the number of rows written or deleted. Raises sqlite3.Error / OSError when the disk refuses.
        Whole under the outbox's lock, then the database's (always in that order): two saves racing must not let
        an older picture of the outbox overwrite a newer one. With `figures` (the last save of a clean stop), every
        alert row is written with its current summary and figures: a resolve sent after the restart showed the
        summary from when the alert fired (hours old). A save after each poll skips them, to spare 20,000 row
        writes a poll; after a crash, the summary is the one saved with the alert's last change of state. Without
        the book, `groups` are alert groups whose rows a delivery changed (what their receiver now has), written
        in the same transaction as the outbox's rows."""
        with outbox.changed, self._lock:
            self._heal_if_replaced()
            written = self._save(book, outbox, figures, groups or {})
            if book is not None:
                self.full_save_owed = False
            return written

    def _heal_if_replaced(self) -> None:
        """state.db deleted (a clean-up, a hand, the whole state directory) or replaced while lagwatch runs:
        SQLite went on writing a file no longer there, /readyz said nothing, and a crash then announced every
        incident again from the last good copy. A new database takes its place (its directory made again if it is
        gone), and this save and the next with the book write everything again. While it cannot be made, saves
        fail (counted, alerting goes on from memory) and each tries again."""
        if self._reopen_owed:
            self._reopen()
            return
        if self._db is None or self.read_only or self._identity is None:
            return
        now = _identity(self.path)
        if now == self._identity:
            return
        self.replaced += 1
        log.error(
            "state database deleted or replaced while lagwatch runs: writing the whole state to a new one",
            extra={"file": str(self.path)},
        )
        # Closed first: closing it later would remove by name the new database's write-ahead log.
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._db, self._reopen_owed = None, True
        if now is not None:  # something else in its place: set aside, never overwritten
            aside = _unused(self.path.with_name(f"{FILE}.set-aside-{int(time.time())}"))
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.replace(Path(f"{self.path}{suffix}"), Path(f"{aside}{suffix}"))
        self._reopen()

    def _reopen(self) -> None:
        """A new, empty database at the path, written whole by the next saves; OSError while it cannot be made."""
        try:
            self._claim_directory()
            if not self.path.exists():  # the log of the file that went is not this new file's
                self._move_aside(("-wal", "-shm"))
            db = self._connect(self.path)
            self._mark_running(db)
        except (sqlite3.Error, OSError) as e:
            raise OSError(f"state database {self.path} cannot be made again: {e}") from None
        self._db, self._reopen_owed = db, False
        self._identity = _identity(self.path)
        self._written = {t: {} for t in self._written}
        self.full_save_owed = True
        log.warning("state database made again: the whole state is written to it", extra={"file": str(self.path)})

    def _save(self, book: AlertBook | None, outbox: Any, figures: bool, groups: Mapping[str, Any]) -> int:
        wanted: dict[str, dict[str, Hashable]] = {}
        objects: dict[str, dict[str, Any]] = {}  # per table, for rows given by a fingerprint: what the body is of
        if book is None and self.full_save_owed:  # a new file: the whole outbox now, the book at its next save
            wanted["refs"] = {k: _dumps(v) for k, v in outbox.refs.items()}
            deliveries = {f"{d.notifier}|{d.notification.id}": d for d in outbox.deliveries}
            wanted["outbox"] = {key: _fingerprint(d) for key, d in deliveries.items()}
            changed: dict[str, dict[str, Hashable | None]] = {}
        elif book is not None:
            # An alert's figures (summary, lag) change every poll and come back with the next one: its row is
            # rewritten only when its state does.
            objects["alerts"] = book.alerts
            # A tuple's hash, not a string: no float formatted (20,000 alerts at every poll at 10,000 lagging
            # groups), and hashed once (an int hashes for nothing where it is compared and kept).
            wanted["alerts"] = {a.key: hash(_alert_fingerprint(a)) for a in book.alerts.values()}
            if figures:  # every row written again, figures included (once, at a clean stop: 20,000 rows, ~0.3 s)
                wanted["alerts"] = {a.key: (*_alert_fingerprint(a), _dumps(vars(a))) for a in book.alerts.values()}
            objects["alert_groups"] = book.groups
            wanted["alert_groups"] = {g.key: g.fingerprint() for g in book.groups.values()}
            objects["storms"] = book.storms
            wanted["storms"] = {s.key: _flat_fingerprint(vars(s)) for s in book.storms.values()}
            wanted["silences"] = {s.id: _dumps(vars(s)) for s in book.silences if s.created_by != "config"}
            wanted["meta"] = {"sequence": str(book.sequence)}
            # With the book (after a poll): the whole outbox is compared with what was written, as a check.
            wanted["refs"] = {k: _dumps(v) for k, v in outbox.refs.items()}
            deliveries = {f"{d.notifier}|{d.notification.id}": d for d in outbox.deliveries}
            wanted["outbox"] = {key: _fingerprint(d) for key, d in deliveries.items()}
            changed = {}
        else:  # after a delivery: only the rows the outbox says changed
            deliveries = {k: d for k, d in outbox.unsaved_deliveries.items() if d is not None}
            changed = {
                "outbox": {k: None if d is None else _fingerprint(d) for k, d in outbox.unsaved_deliveries.items()},
                "refs": {k: _dumps(outbox.refs[k]) if k in outbox.refs else None for k in outbox.unsaved_refs},
            }
        if book is None and groups:
            objects["alert_groups"] = {key: g for key, g in groups.items() if g is not None}
            changed["alert_groups"] = {key: None if g is None else g.fingerprint() for key, g in groups.items()}
        statements: list[tuple[str, tuple[Any, ...]]] = []
        for table, rows in wanted.items():
            statements += self._row_changes(table, rows, objects.get(table), deliveries)
        for table, some in changed.items():
            statements += self._some_row_changes(table, some, objects.get(table), deliveries)
        if statements:  # no transaction (and no fsync) for a save that changes nothing, as after most polls
            with self._transaction() as db:
                for sql, params in statements:
                    db.execute(sql, params)
        # Only now is it on disk: from here on, saves need not write it again.
        for table, rows in wanted.items():
            self._written[table] = {key: hash(content) for key, content in rows.items()}
        for table, some in changed.items():
            written = self._written.setdefault(table, {})
            for key, change in some.items():
                if change is None:
                    written.pop(key, None)
                else:
                    written[key] = hash(change)
        outbox.unsaved_deliveries.clear()
        outbox.unsaved_refs.clear()
        self.writes += len(statements)
        return len(statements)

    def _some_row_changes(
        self,
        table: str,
        some: Mapping[str, Hashable | None],
        objects: Mapping[str, Any] | None,
        deliveries: dict[str, Any],
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements for some rows of `table` (None: the row goes), the rest as it was written."""
        written = self._written.setdefault(table, {})
        rows = {k: v for k, v in some.items() if v is not None}
        gone = [(f"DELETE FROM {table} WHERE {_KEY_COLUMN.get(table, 'key')} = ?", (k,)) for k, v in some.items()
                if v is None and k in written]  # fmt: skip
        return gone + self._row_changes(table, rows, objects, deliveries, only_these=True)

    def _row_changes(
        self,
        table: str,
        rows: Mapping[str, Hashable],
        objects: Mapping[str, Any] | None,
        deliveries: dict[str, Any],
        only_these: bool = False,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements that bring `table` from what was written to `rows` (key -> what identifies the row's
        content: the body itself, or a fingerprint of the object in `objects` whose fields are the body, or for the
        outbox a fingerprint of the delivery's state). `only_these`: rows not named are left as they are."""
        written = self._written.setdefault(table, {})
        column = _KEY_COLUMN.get(table, "key")
        out: list[tuple[str, tuple[Any, ...]]] = (
            []
            if only_these
            else [(f"DELETE FROM {table} WHERE {column} = ?", (key,)) for key in written if key not in rows]
        )
        for key, content in rows.items():
            if written.get(key) == hash(content):
                continue
            if table == "outbox":
                d = deliveries[key]
                values: tuple[Any, ...] = (
                    key,
                    d.notification.id,
                    d.notifier,
                    _dumps(d.notification.to_json()),
                    d.attempts,
                    d.next_attempt_at,
                    d.last_error,
                    d.in_flight,
                )
                out.append(("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values))
            else:
                # Shallow: the fields are plain values, dicts and lists (dataclasses.asdict copies deeply, 10x slower).
                body = _dumps(vars(objects[key])) if objects is not None else content
                out.append((f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", (key, body)))
        return out

    def import_json_state(self, raw: dict[str, Any]) -> None:
        """The alerts.json of older versions, row by row as it was (the book converts old shapes when it loads)."""
        book = raw.get("book") or {}
        outbox = raw.get("outbox") or {}
        with self._transaction() as db:
            for table, items, key in (
                ("alerts", book.get("alerts", []), "key"),
                ("alert_groups", book.get("groups", []), "key"),
                ("silences", book.get("silences", []), "id"),
            ):
                for item in items:
                    if isinstance(item, dict) and isinstance(item.get(key), str):
                        db.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", (item[key], _dumps(item)))
            for ref_key, ref in (outbox.get("refs") or {}).items():
                db.execute("INSERT OR REPLACE INTO refs VALUES (?, ?)", (ref_key, _dumps(ref)))
            for d in outbox.get("deliveries", []):
                n = d.get("notification") or {}
                key = f"{d.get('notifier')}|{n.get('id')}"
                db.execute(
                    "INSERT OR REPLACE INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        key,
                        n.get("id"),
                        d.get("notifier"),
                        _dumps(n),
                        d.get("attempts", 0),
                        d.get("next_attempt_at", 0.0),
                        d.get("last_error"),
                    ),
                )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('sequence', ?)", (str(book.get("sequence", 0)),))

    # -- history --------------------------------------------------------------------------------------------------

    def read_history(self, cluster: str) -> Iterable[dict[str, Any]]:
        """The cluster's history, then the one saved before it (the caller takes the first that loads)."""
        with self._lock:
            row = self.db.execute("SELECT body, previous FROM history WHERE cluster = ?", (cluster,)).fetchone()
        for body in row or ():
            if body is None:
                continue
            try:
                value = json.loads(body)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value

    def write_history(self, cluster: str, data: dict[str, Any]) -> None:
        body = json.dumps(data, separators=(",", ":"))
        with self._transaction() as db:
            db.execute(
                "INSERT INTO history VALUES (?, ?, NULL) "
                "ON CONFLICT(cluster) DO UPDATE SET previous = history.body, body = excluded.body",
                (cluster, body),
            )


class StateClosedError(RuntimeError):
    """A write after the stop closed the database."""


class _NewerSchemaError(Exception):
    pass


class StateDamagedError(sqlite3.DatabaseError):
    """The state database is not sound: kept aside for inspection, never used or overwritten."""


def _number(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _unused(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`...: two set-asides in one second overwrote the first (os.replace)."""
    candidate, n = path, 1
    while any(Path(f"{candidate}{suffix}").exists() for suffix in ("", "-wal", "-shm")):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False
