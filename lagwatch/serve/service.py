"""What the HTTP side asks of the daemon, and all it may ask: the daemon implements this (structurally), and serve/
never imports it. Each call takes whatever locks it needs; what it returns is the caller's to keep."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from lagwatch.alerts import Alert, AlertState, Silence
from lagwatch.notify import WorkerHealth
from lagwatch.runtime import ClusterRuntime
from lagwatch.serve.settings import HttpConfig


class Service(Protocol):
    @property
    def http_settings(self) -> HttpConfig: ...

    def now(self) -> float:
        """The daemon's clock (steady across host clock steps)."""
        ...

    def runtimes(self) -> Mapping[str, ClusterRuntime]:
        """Each configured cluster's runtime: its last poll, evaluation and counters."""
        ...

    def alerts(
        self, cluster: str | None = None, group: str | None = None, state: AlertState | None = None
    ) -> list[tuple[Alert, Silence | None]]:
        """The book's alerts, by cluster, group and rule, each with the silence that mutes it now (copies)."""
        ...

    def silences(self, include_ended: bool = False) -> list[Silence]:
        """Active and future silences; with `include_ended`, those the book still keeps after their end too."""
        ...

    def add_silence(self, silence: Silence) -> None:
        """Adds it to the book and saves the alert state."""
        ...

    def delete_silence(self, silence_id: str) -> None:
        """Removes it from the book and saves the alert state."""
        ...

    def scheduler_running(self) -> bool: ...

    def notifiers_supervised(self) -> bool:
        """The notifier workers' supervisor runs (a dead worker will be started again)."""
        ...

    def worker_health(self) -> dict[str, WorkerHealth]: ...

    def state_owed(self) -> bool:
        """The last save of the alert state failed: memory is ahead of the disk."""
        ...

    def state_notes(self) -> list[str]:
        """What was found wrong with the saved state at start, and what lagwatch went on from."""
        ...

    def metrics_chunks(self, tail: bytes, gzip: bool) -> Iterator[bytes]:
        """The per-poll /metrics body and `tail`, gzipped or as text, a piece at a time."""
        ...
