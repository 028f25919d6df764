"""The state directory: a lock, and the state database (see db.py).

  state.db             alert states, alert groups, storms, API silences, the outbox, message references, history
  state.db.last-good   a copy made at every clean stop, used when state.db is damaged or from a newer lagwatch
  lock                 held while a daemon runs (with the directory itself): two daemons on one state directory
                       would send duplicates

Older lagwatch versions wrote JSON files (alerts.json, history/<cluster>.json): they are imported once, then
renamed `*.imported`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable
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
        self.db = StateDatabase(directory, relock=self._relock)

    def open(self) -> StateStore:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LagwatchError(f"state_dir {str(self.directory)!r}: cannot create it: {e.strerror}") from None
        try:
            self._lock_file, self._dir_fd = _lock(self.directory)
        except BlockingIOError:
            raise StateLockedError(f"state_dir {str(self.directory)!r} is in use by another lagwatch process") from None
        except OSError as e:
            raise LagwatchError(f"state_dir {str(self.directory)!r}: cannot write in it: {e.strerror}") from None
        self.db.open()
        self._import_json_files()
        return self

    def close(self, clean: bool = True) -> None:
        self.db.close(clean=clean)
        self._unlock()

    def _unlock(self) -> None:
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
        self._unlock()
        self._lock_file, self._dir_fd = held

    # -- alerts, outbox, history ----------------------------------------------------------------------------------

    def read_alerts(self) -> dict[str, Any]:
        return self.db.load_alerts()

    def save_alerts(self, book: AlertBook | None, outbox: Any) -> int:
        return self.db.save(book, outbox)

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
