"""Lag in seconds, production and consumption rates, and the catch-up ETA. Pure functions of history + now."""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from typing import Any, NamedTuple

from lagwatch.history.store import ClusterHistory
from lagwatch.history.timeline import LogEndTimeline
from lagwatch.lag import GroupLag, PartitionLag
from lagwatch.model import TopicPartition


# LagTime and PartitionMeasure: NamedTuples (immutable, typed) rather than frozen dataclasses, which take 2.7x as
# long to build: one of each per group-partition at every poll (bench/daemon_step_bench.py).
class LagTime(NamedTuple):
    """Seconds since the next record to consume was produced. None: unknown (too little history)."""

    seconds: float | None
    estimated: bool = False
    exact: bool = False  # read from the record's own timestamp (exact mode), not interpolated


UNKNOWN = LagTime(None)
_new_tuple = tuple.__new__
ESTIMATED, EXACT = 1, 2  # GroupMeasure.lag_kinds
# Also in lag_kinds: the row has no lag in seconds, no consumption rate (their columns hold 0.0 there).
NO_SECONDS, NO_CONSUMPTION = 4, 8
_MISSING = object()
CAUGHT_UP = LagTime(0.0)


class PartitionMeasure(NamedTuple):
    partition: PartitionLag
    lag_time: LagTime
    production_rate: float | None  # records/s appended to the partition over the rate window
    consumption_rate: float | None  # records/s the group's committed offset advanced


class GroupMeasure(NamedTuple):
    """A NamedTuple like the rows it holds: one per group at every poll, and a frozen dataclass sets each of its
    fields through object.__setattr__.

    The per-partition figures are columns, one entry per row of `lag.partitions` in its order, not a
    PartitionMeasure and a LagTime per group-partition: those were 150 bytes and two objects built and freed per
    group-partition at every poll (150 MB at 1M group-partitions, kept between polls for the exporter and the
    API). `partitions` and `by_topic` build the rows on demand (the API, the lake, per-partition series)."""

    lag: GroupLag
    # Each row's LagTime.seconds (`seconds(i)`): machine doubles, 0.0 where lag_kinds says NO_SECONDS; a tuple
    # where one is not a float (an int `now` given by a test): the figures must read back as they were made. A
    # float object per group-partition kept till the next poll was 24 MB at 1M group-partitions.
    lag_seconds: array[float] | tuple[float | None, ...]
    lag_kinds: bytes  # each row's flags: ESTIMATED, EXACT (its LagTime), NO_SECONDS, NO_CONSUMPTION
    production_rates: tuple[float | None, ...]  # records/s appended to each row's partition over the rate window
    # Records/s each row's committed offset advanced (`consumption(i)`): machine doubles, 0.0 where lag_kinds says
    # NO_CONSUMPTION (ClusterHistory.consumption_rate gives floats only; 24 MB of float objects at 1M).
    consumption_rates: array[float]
    max_lag_seconds: float | None
    lag_seconds_estimated: bool
    production_rate: float | None
    consumption_rate: float | None
    eta_s: float | None  # time to catch up at current rates; None when not catching up or nothing to catch up
    # Per topic, taken in measure_group's one pass (the lag rule and the exporter ask for every topic at every poll).
    # Tuples in the order of lag.topics, not dicts: one measure per group is kept per evaluation (two while a poll
    # runs), and a dict and a set per group were 9 MB more RSS at 10,000 groups.
    topic_lag_seconds: tuple[float | None, ...]  # the worst known lag in seconds; None: none known
    topic_estimated: tuple[bool, ...]  # whether that lag in seconds is an estimate

    def seconds(self, i: int) -> float | None:
        """Row `i`'s lag in seconds (None: unknown)."""
        column = self.lag_seconds
        if type(column) is tuple:
            return column[i]
        return None if self.lag_kinds[i] & NO_SECONDS else column[i]

    def consumption(self, i: int) -> float | None:
        """Row `i`'s consumption rate (None: none)."""
        return None if self.lag_kinds[i] & NO_CONSUMPTION else self.consumption_rates[i]

    def lag_time(self, i: int) -> LagTime:
        """Row `i`'s lag in seconds."""
        kind = self.lag_kinds[i]
        return _new_tuple(LagTime, (self.seconds(i), bool(kind & ESTIMATED), bool(kind & EXACT)))

    def partition(self, i: int, row: PartitionLag | None = None) -> PartitionMeasure:
        """Row `i` as a PartitionMeasure (`row`: its PartitionLag, if built already)."""
        return _new_tuple(
            PartitionMeasure,
            (
                self.lag.row(i) if row is None else row,
                self.lag_time(i),
                self.production_rates[i],
                self.consumption(i),
            ),
        )

    @property
    def partitions(self) -> tuple[PartitionMeasure, ...]:
        """Every row, built on demand."""
        return tuple(self.partition(i, row) for i, row in enumerate(self.lag.partitions))

    @property
    def by_topic(self) -> dict[str, tuple[PartitionMeasure, ...]]:
        """The rows of each topic, in the order of lag.topics (each topic's rows are adjacent), built on demand."""
        rows = self.partitions
        out = {}
        offset = 0
        for t in self.lag.topics:
            out[t.topic] = rows[offset : offset + t.partitions]
            offset += t.partitions
        return out

    @property
    def falling_behind(self) -> bool:
        """Consuming slower than producing, by more than the rates' own noise: a group that keeps up consumed
        19.80 records/s against 19.82 produced (its commits land in steps) and the API said it fell behind. The
        `falling_behind` rule, which pages, judges the lag's trend over its window instead."""
        if self.lag.sum_lag <= 0 or self.production_rate is None or self.consumption_rate is None:
            return False
        return self.production_rate - self.consumption_rate > FALLING_BEHIND_MARGIN * self.production_rate


# Consumption this much below production (a fraction of it) is falling behind; less is the rates' noise.
FALLING_BEHIND_MARGIN = 0.02


def lag_seconds(
    timeline: LogEndTimeline | None,
    committed: int | None,
    log_end: int | None,
    now: float,
    written_at: float | None = None,
) -> LagTime:
    if committed is None or log_end is None:
        return UNKNOWN
    if committed >= log_end:
        return CAUGHT_UP  # caught up is 0 s, whatever the history
    # LagTime built with tuple.__new__ and every field, and no max() call: this runs for every lagging
    # group-partition at every poll, and a NamedTuple's own __new__ is a Python function (half of this call).
    if written_at is not None and math.isfinite(written_at):
        seconds = now - written_at
        return _new_tuple(LagTime, (seconds if seconds > 0.0 else 0.0, False, True))
    if timeline is None:
        return LagTime(None)
    produced = timeline.produced_at(committed)
    if produced is None:
        return LagTime(None)
    at, estimated = produced
    seconds = now - at
    if not math.isfinite(seconds):
        return LagTime(None)
    return _new_tuple(LagTime, (seconds if seconds > 0.0 else 0.0, estimated, False))


def measure_group(
    lag: GroupLag,
    history: ClusterHistory,
    now: float,
    rate_since: float,
    record_times: Mapping[tuple[TopicPartition, int], float] | None = None,
    production_rates: dict[float, dict[TopicPartition, float | None]] | None = None,
) -> GroupMeasure:
    """Rates are measured from `rate_since` (the rate window, cut short where observation was interrupted)."""
    since = rate_since
    timelines = history.timelines
    track = history.groups.get(lag.group.group_id)
    progresses = track.partitions if track is not None else {}
    consumption_rate = history.consumption_rate
    start = history.window_start(since)  # once per group: every partition's rate starts at the same poll
    # Every group on a partition asks for the same rate: computed once per evaluation and window start.
    all_rates = production_rates if production_rates is not None else {}
    rates = all_rates.get(since)
    if rates is None:
        rates = all_rates[since] = {}
    seconds_column: list[float | None] = []
    all_floats = True  # every lag in seconds known is a float: the column is kept as machine doubles
    kinds = bytearray(len(lag.tps))
    production_column: list[float | None] = []
    consumption_column: list[float] = []
    topic_seconds: dict[str, float] = {}
    estimated_topics: set[str] = set()
    max_seconds: float | None = None
    production: float | None = None  # sums over the committed partitions with a rate: None when none has one
    consumption: float | None = None
    isfinite = math.isfinite
    missing: Any = _MISSING  # typed Any: `rates.get(tp, missing)` is a rate or the sentinel
    # The figures are summed in this one pass: it runs per group-partition. group_lag's rows come sorted by topic.
    columns = zip(lag.tps, lag.committed, lag.log_ends, lag.lags, strict=True)
    for i, (tp, committed, log_end, row_lag) in enumerate(columns):
        timeline = timelines.get(tp)
        production_rate = None
        if timeline is not None:
            production_rate = rates.get(tp, missing)
            if production_rate is missing:
                production_rate = rates[tp] = timeline.rate(since)
        progress = progresses.get(tp)
        if committed is None or log_end is None:
            seconds = None  # UNKNOWN
        elif committed >= log_end or row_lag == 0:  # at the log end, or only markers or open transactions above
            seconds = 0.0  # CAUGHT_UP: the common answers without a call (this runs for every group-partition)
            if tp.topic not in topic_seconds:
                topic_seconds[tp.topic] = 0.0
        else:
            written_at = record_times.get((tp, committed)) if record_times else None
            estimated = False
            if written_at is None and timeline is not None:  # lag_seconds inlined for its common case
                produced = timeline.produced_at(committed)
                if produced is None:
                    seconds = None
                else:
                    at, estimated = produced
                    behind = now - at
                    if isfinite(behind):
                        seconds = behind if behind > 0.0 else 0.0
                        if estimated:
                            kinds[i] = ESTIMATED
                    else:
                        seconds = None
            else:
                lag_time = lag_seconds(timeline, committed, log_end, now, written_at)
                seconds, estimated = lag_time.seconds, lag_time.estimated
                if seconds is not None and type(seconds) is not float:
                    all_floats = False  # `now` minus a record's time, both ints (a test's)
                kinds[i] = (ESTIMATED if estimated else 0) | (EXACT if lag_time.exact else 0)
            if seconds is not None:
                topic = tp.topic
                worst = topic_seconds.get(topic)
                if worst is None or seconds > worst:
                    topic_seconds[topic] = seconds
                if estimated:
                    estimated_topics.add(topic)
            else:  # records wait, and when they were written is unknown (a log's history wiped by an election):
                estimated_topics.add(tp.topic)  # the topic's figure is only its other partitions', a lower bound
        consumed = consumption_rate(progress, since, start) if progress is not None else None
        seconds_column.append(seconds)
        production_column.append(production_rate)
        if seconds is None:
            kinds[i] |= NO_SECONDS
        if consumed is None:
            kinds[i] |= NO_CONSUMPTION
            consumption_column.append(0.0)
        else:
            consumption_column.append(consumed)
        if committed is not None:
            if production_rate is not None:
                production = production_rate if production is None else production + production_rate
            if consumed is not None:
                consumption = consumed if consumption is None else consumption + consumed
    if topic_seconds:
        max_seconds = max(topic_seconds.values())
    eta = None
    if lag.sum_lag > 0 and production is not None and consumption is not None and consumption > production:
        eta = lag.sum_lag / (consumption - production)
    return GroupMeasure(
        lag=lag,
        lag_seconds=array("d", [0.0 if x is None else x for x in seconds_column])
        if all_floats
        else tuple(seconds_column),
        lag_kinds=bytes(kinds),
        production_rates=tuple(production_column),
        consumption_rates=array("d", consumption_column),
        max_lag_seconds=max_seconds,
        lag_seconds_estimated=bool(estimated_topics),
        production_rate=production,
        consumption_rate=consumption,
        eta_s=eta,
        topic_lag_seconds=tuple([topic_seconds.get(t.topic) for t in lag.topics]),
        topic_estimated=tuple([t.topic in estimated_topics for t in lag.topics]),
    )
