"""Files in the state directory, each written atomically (temp file, fsync, rename), so a SIGKILL at any moment
leaves either the old or the new version, never half of one.

  alerts.json            alert states, alert groups (with notifier references), API silences, and the outbox
  history/<cluster>.json log-end timelines, commit progress and expiry clocks of one cluster
  lock                   held while a daemon runs: two daemons on one state directory would send duplicates
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import IO, Any

from lagwatch.errors import LagwatchError

log = logging.getLogger(__name__)


class StateLockedError(LagwatchError):
    pass


class StateStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock_file: IO[str] | None = None

    def open(self) -> StateStore:
        try:
            (self.directory / "history").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LagwatchError(f"state_dir {str(self.directory)!r}: cannot create it: {e.strerror}") from None
        self._lock_file = open(self.directory / "lock", "a+")  # noqa: SIM115 - held for the daemon's lifetime
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise StateLockedError(f"state_dir {str(self.directory)!r} is in use by another lagwatch process") from None
        return self

    def close(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    # -- generic --------------------------------------------------------------------------------------------------

    def read(self, name: str) -> Any | None:
        path = self.directory / name
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            # A damaged file must not stop the daemon: keep it for inspection and start that part afresh.
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            os.replace(path, aside)
            log.error(
                "state file unreadable, moved aside", extra={"file": str(path), "moved_to": str(aside), "error": str(e)}
            )
            return None

    def write(self, name: str, data: Any) -> None:
        path = self.directory / name
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- named parts ----------------------------------------------------------------------------------------------

    def read_alerts(self) -> dict[str, Any] | None:
        return self.read("alerts.json")

    def write_alerts(self, data: dict[str, Any]) -> None:
        self.write("alerts.json", data)

    @staticmethod
    def _history_name(cluster: str) -> str:
        return f"history/{re.sub(r'[^A-Za-z0-9_.-]', '_', cluster)}.json"

    def read_history(self, cluster: str) -> dict[str, Any] | None:
        return self.read(self._history_name(cluster))

    def write_history(self, cluster: str, data: dict[str, Any]) -> None:
        self.write(self._history_name(cluster), data)
