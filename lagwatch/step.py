"""CORE: the one pipeline step, shared by the daemon, the tests and the Spark backtest.

    records from __consumer_offsets (optional) + snapshot -> history -> rules -> alert lifecycle

Pure: time comes from the snapshot; the state (history, alert book) is plain data that is saved, restored and
replayed by the caller. Notifications are taken separately (`due`), because the daemon hands them to its outbox
under the outbox's lock, and a backtest may take them at every step or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts import AlertBook, Notification
from lagwatch.history import ClusterHistory, polls_to_keep
from lagwatch.model import ClusterSnapshot, TopicPartition
from lagwatch.offsets_topic import Record
from lagwatch.rules import Evaluation, RuleResolver, evaluate


@dataclass
class ClusterPipeline:
    cluster: str
    history: ClusterHistory
    resolver: RuleResolver
    book: AlertBook  # may be shared by several clusters (alert groups can span them)
    use_last_stable: bool = False
    # Held only while the book is read or changed, not while the rules run: other clusters and the API go on.
    book_lock: AbstractContextManager[Any] = field(default_factory=nullcontext)

    def __post_init__(self) -> None:
        self.history.stall_window_of = self._stall_window  # the waits `stalled` learns, by its own window

    @classmethod
    def build(
        cls,
        cluster: str,
        resolver: RuleResolver,
        book: AlertBook,
        *,
        history: ClusterHistory | None = None,
        poll_interval_s: float | None = None,
        max_gap_s: float | None = None,
        read_committed: bool = False,
        book_lock: AbstractContextManager[Any] | None = None,
    ) -> ClusterPipeline:
        """The pipeline of one cluster, as the daemon runs it, the backtest replays it (with the poll interval and
        settings the lake recorded) and the tests drive it: the one place its parts are sized."""
        pipeline = cls(cluster, history or ClusterHistory(cluster), resolver, book, read_committed)
        if book_lock is not None:
            pipeline.book_lock = book_lock
        pipeline.configure(
            resolver, poll_interval_s=poll_interval_s, max_gap_s=max_gap_s, read_committed=read_committed
        )
        return pipeline

    def configure(
        self,
        resolver: RuleResolver,
        *,
        poll_interval_s: float | None = None,
        max_gap_s: float | None = None,
        read_committed: bool = False,
        keep_at_least: int = 0,
    ) -> None:
        """Takes up a configuration (at the start, or a replay's daemon restart with another one). `max_gap_s`:
        longer than this between two good polls, lagwatch was blind. `poll_interval_s`: the history keeps the
        polls the longest window a rule reads needs (and at least `keep_at_least`); None, it keeps what it has."""
        self.resolver, self.use_last_stable = resolver, read_committed
        if max_gap_s is not None:
            self.history.max_gap_s = max_gap_s
        if poll_interval_s is not None:
            needed = polls_to_keep(resolver.config.longest_history_s(), poll_interval_s)
            self.history.keep = max(keep_at_least, needed)

    def _stall_window(self, group: str, tp: TopicPartition) -> float | None:
        rule = self.resolver.resolve(self.cluster, group, tp.topic)[0].stalled
        return rule.window_s if rule.enabled and rule.learn_commit_interval else None

    def step(
        self, snapshot: ClusterSnapshot, records: Iterable[Record] = (), records_caught_up: bool = False
    ) -> Evaluation:
        """Folds one poll (and the `__consumer_offsets` records read since the last one) into the history, runs
        the rules, and moves the alerts of this cluster along their lifecycle. Only one thread steps a cluster."""
        self.history.observe_records(records, records_caught_up)
        if self.holds(snapshot):
            # Dated at or before a poll already folded in: the clock it was dated by went back. The history keeps
            # time in order, so it cannot take it; the alerts stay exactly as they are (resolving them on a poll
            # the history ignored resolved every firing alert without a word). The daemon's clock never goes back
            # (lagwatch.clock) but for a step larger than it absorbs; a replay of such a lake meets this too. What
            # happens meanwhile is not seen: a blind spell, after which window rules need fresh evidence.
            self.history.blind = True
            return Evaluation(self.cluster, snapshot.taken_at, (), frozen_groups=None)
        resumed = self.history.observe(snapshot)
        with self.book_lock:
            active = self.book.active_severities(self.cluster)
        evaluation = evaluate(snapshot, self.history, self.resolver, active, self.use_last_stable)
        with self.book_lock:
            if resumed:
                self.book.forget_pending(self.cluster)  # lagwatch was blind: `for` counts fresh evidence only
            self.book.apply(
                self.cluster,
                evaluation.findings,
                evaluation.frozen_groups,
                evaluation.now,
                evaluation.held,
                evaluation.partial_groups,
            )
        return evaluation

    def holds(self, snapshot: ClusterSnapshot) -> bool:
        """Whether `step` holds this poll: dated at or before the last one the history took."""
        last = self.history.last_ok_poll
        return last is not None and snapshot.taken_at <= last

    def due(self, now: float) -> list[Notification]:
        return self.book.due(now)
