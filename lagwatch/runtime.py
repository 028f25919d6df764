"""What the daemon knows of one cluster at run time: its poller, history, latest poll and counters."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lagwatch.config import ClusterConfig
from lagwatch.history import ClusterHistory
from lagwatch.model import ClusterSnapshot
from lagwatch.offsets_topic import Record
from lagwatch.rules import Evaluation

PUBLISHED_WAIT_S = 10.0  # how long the API waits for a step under way before it answers without its evaluation
HISTORY_WRITE_HUNG_S = 120.0  # a history save (about 0.3 s at 100k group-partitions) still running after this


@dataclass
class ClusterRuntime:
    name: str
    config: ClusterConfig
    poller: Any  # ClusterPoller, or anything with poll() -> ClusterSnapshot and close()
    history: ClusterHistory
    lock: threading.Lock = field(default_factory=threading.Lock)
    polling: threading.Lock = field(default_factory=threading.Lock)  # held by a poll and its step (Daemon.stop)
    latest: ClusterSnapshot | None = None
    evaluation: Evaluation | None = None
    last_success: float | None = None
    polls: int = 0
    failed_polls: int = 0
    skipped_polls: int = 0  # due while the previous poll still ran (EVENT_JOB_MAX_INSTANCES)
    missed_polls: int = 0  # too late to start within the misfire grace time
    history_saved_at: float = 0.0
    history_owed: bool = False  # the last save of its history failed (logged once per streak)
    history_write: Future[None] | None = None  # the save under way on the daemon's history writer
    history_write_started: float = 0.0  # time.monotonic() when it was handed to the writer

    unwatched_said: set[str] = field(default_factory=set)  # group types whose unwatched groups were logged
    blind_spots_said: set[str] = field(default_factory=set)  # the cluster's blind spots logged (by name)

    def unwatched_news(self, unwatched: Mapping[str, int]) -> dict[str, int]:
        """The group types of `unwatched` (type -> groups) not said before: each is logged once per run, not at
        every poll."""
        news = {kind: n for kind, n in unwatched.items() if n and kind not in self.unwatched_said}
        self.unwatched_said |= set(news)
        return news

    def blind_spot_news(self, spots: Mapping[str, str]) -> dict[str, str]:
        """The blind spots (name -> why) not said before: each is logged once per run, not at every poll."""
        news = {spot: why for spot, why in spots.items() if spot not in self.blind_spots_said}
        self.blind_spots_said |= set(news)
        return news

    def history_write_hung_s(self, now_monotonic: float) -> float | None:
        """How long the history save under way has run, when longer than HISTORY_WRITE_HUNG_S (a disk that
        neither answers nor fails); else None."""
        write = self.history_write
        if write is None or write.done():
            return None
        running = now_monotonic - self.history_write_started
        return running if running > HISTORY_WRITE_HUNG_S else None

    def published(self, wait_s: float = PUBLISHED_WAIT_S) -> tuple[ClusterSnapshot | None, Evaluation | None]:
        """The latest poll and its evaluation, as one pair. A step under way has let go of the last evaluation
        (two at once cost RSS), so this waits for the step to end (about 1 s at 100k group-partitions), up to
        `wait_s`; then it answers with what there is rather than hang the API."""
        locked = self.lock.acquire(timeout=wait_s)
        try:
            return self.latest, self.evaluation
        finally:
            if locked:
                self.lock.release()

    offsets_reader: Any = None  # OffsetsTopicReader (exact clocks), or None where turned off
    # For the lake: the records folded into the history since the last step, which the lake records with the next
    # poll so that a replay feeds the step the same (kept only while the lake is on).
    lake_records: list[Record] = field(default_factory=list)
    lake_records_caught_up: bool = False

    def take_lake_records(self) -> tuple[list[Record], bool]:
        """Under `lock`: the records since the last step, and whether the reader has caught up."""
        records, self.lake_records = self.lake_records, []
        return records, self.lake_records_caught_up

    def exact_clocks(self) -> dict[str, Any]:
        """State of the `__consumer_offsets` reader, for the API and metrics."""
        if self.offsets_reader is None:
            return {"state": "off", "records": 0, "undecodable": 0, "error": None}
        status = self.offsets_reader.status()
        return {
            "state": status.state.value,
            "records": status.records,
            "undecodable": status.undecodable,
            "error": status.error,
        }
