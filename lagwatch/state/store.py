"""The state directory: a lock, and the state database (see db.py).

  state.db             alert states, alert groups, storms, API silences, the outbox, message references, history
  state.db.last-good   a copy made at every clean stop, used when state.db is damaged or from a newer lagwatch
  lock                 held while a daemon runs (with the directory itself, and the directory's name: see
                       _lock_name): two daemons on one state directory would send duplicates

Older lagwatch versions wrote JSON files (alerts.json, history/<cluster>.json): they are imported once, then
renamed `*.imported`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from lagwatch.alerts import AlertBook
from lagwatch.errors import LagwatchError
from lagwatch.state.db import StateDatabase

log = logging.getLogger(__name__)


class StateLockedError(LagwatchError):
    pass


class StateStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock_file: IO[str] | None = None
        self._dir_fd: int | None = None
        self._name_lock: socket.socket | None = None
        self.db = StateDatabase(directory, relock=self._relock)

    def open(self) -> StateStore:
        """Locks the state directory and opens its database. A directory that cannot be made or written (a
        read-only or missing volume) is no reason not to alert: lagwatch runs from memory, says so, and saves
        once the disk takes writes (StateDatabase)."""
        where = f"state_dir {str(self.directory)!r}"
        self._name_lock = _lock_name(self.directory)  # first: held whatever becomes of the directory
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.error(f"{where}: cannot create it ({e.strerror}): alerting goes on from memory, saves are tried again")
        try:
            self._lock_file, self._dir_fd = _lock(self.directory)
        except BlockingIOError:
            self._unlock()
            raise StateLockedError(f"{where} is in use by another lagwatch process") from None
        except OSError as e:  # read-only or missing: the name lock alone holds
            log.debug("state directory not locked by file", extra={"error": e.strerror})
        self.db.open()
        if not self.db.read_only:
            self._import_json_files()
        return self

    def close(self, clean: bool = True) -> None:
        self.db.close(clean=clean)
        self._unlock()

    def _unlock(self) -> None:
        if self._name_lock is not None:
            self._name_lock.close()
            self._name_lock = None
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _relock(self) -> None:
        """The directory was made again while lagwatch runs: the locks held are on the one deleted. OSError (a save's
        failure, tried again) while another process holds the new one."""
        try:
            held = _lock(self.directory)
        except BlockingIOError:
            raise OSError(
                f"state_dir {str(self.directory)!r} was made again and is in use by another process"
            ) from None
        for old in (self._lock_file, self._dir_fd):  # the name lock stays: it never went
            if isinstance(old, int):
                os.close(old)
            elif old is not None:
                old.close()
        self._lock_file, self._dir_fd = held

    # -- alerts, outbox, history ----------------------------------------------------------------------------------

    def read_alerts(self) -> dict[str, Any]:
        return self.db.load_alerts()

    def save_alerts(
        self, book: AlertBook | None, outbox: Any, figures: bool = False, groups: Mapping[str, Any] | None = None
    ) -> int:
        return self.db.save(book, outbox, figures, groups)

    def read_history(self, cluster: str) -> Iterable[dict[str, Any]]:
        return self.db.read_history(cluster)

    def write_history(self, cluster: str, data: dict[str, Any]) -> None:
        self.db.write_history(cluster, data)

    # -- the JSON files of older versions -------------------------------------------------------------------------

    def _import_json_files(self) -> None:
        alerts = self.directory / "alerts.json"
        if alerts.is_file():
            raw = _read_json(alerts)
            if raw is not None:
                self.db.import_json_state(raw)
                log.info("alert state imported from alerts.json into state.db")
            os.replace(alerts, alerts.with_name("alerts.json.imported"))
        history = self.directory / "history"
        for path in sorted(history.glob("*.json")) if history.is_dir() else []:
            raw = _read_json(path)
            if raw is not None and isinstance(raw.get("cluster"), str):
                self.db.write_history(raw["cluster"], raw)
            os.replace(path, path.with_name(path.name + ".imported"))


def _lock_name(directory: Path) -> socket.socket:
    """A lock on the state directory's name, not on the directory: an abstract Unix socket bound to a name made
    from its absolute path, which the kernel frees when the process ends and nothing on disk can remove. Locks on
    files went with the directory when it was deleted while lagwatch ran: a second daemon started on the path
    made anew ran beside the first, both notified, and each moved the other's state.db aside. (Abstract names
    are per network namespace: the file locks below still hold between containers that share a volume.)"""
    path = os.path.abspath(directory)
    name = "\0lagwatch-state-" + hashlib.sha256(os.fsencode(path)).hexdigest()[:40]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise StateLockedError(f"state_dir {path!r} is in use by another lagwatch process") from None
        raise LagwatchError(f"state_dir {path!r}: cannot lock it: {e.strerror}") from None
    return sock


def _lock(directory: Path) -> tuple[IO[str], int | None]:
    """The lock file and the directory, locked (BlockingIOError: another process holds them). The directory itself
    is locked too: a `lock` file deleted by a clean-up let a second daemon start on the same state database, and
    both sent every notification. A directory that can be written but not read (mode 0333) cannot be opened: the
    lock file alone, then."""
    lock_file = open(directory / "lock", "a+")  # noqa: SIM115 - held for the daemon's lifetime
    try:
        dir_fd: int | None = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        dir_fd = None
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if dir_fd is not None:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        lock_file.close()
        if dir_fd is not None:
            os.close(dir_fd)  # closing releases whatever lock it held
        raise
    return lock_file, dir_fd


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.error("old state file unreadable, not imported", extra={"file": str(path), "error": str(e)})
        return None
    return value if isinstance(value, dict) else None
