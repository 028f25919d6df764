"""Lag in seconds, production and consumption rates, and the catch-up ETA. Pure functions of history + now."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

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
CAUGHT_UP = LagTime(0.0)


class PartitionMeasure(NamedTuple):
    partition: PartitionLag
    lag_time: LagTime
    production_rate: float | None  # records/s appended to the partition over the rate window
    consumption_rate: float | None  # records/s the group's committed offset advanced


@dataclass(frozen=True, slots=True)
class GroupMeasure:
    lag: GroupLag
    partitions: tuple[PartitionMeasure, ...]
    max_lag_seconds: float | None
    lag_seconds_estimated: bool
    production_rate: float | None
    consumption_rate: float | None
    eta_s: float | None  # time to catch up at current rates; None when not catching up or nothing to catch up
    by_topic: Mapping[str, tuple[PartitionMeasure, ...]] = field(default_factory=dict)

    def max_lag_seconds_of(self, topic: str) -> float | None:
        known = [m.lag_time.seconds for m in self.by_topic.get(topic, ()) if m.lag_time.seconds is not None]
        return max(known) if known else None

    @property
    def falling_behind(self) -> bool:
        if self.lag.sum_lag <= 0 or self.production_rate is None or self.consumption_rate is None:
            return False
        return self.consumption_rate < self.production_rate


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
    if written_at is not None and math.isfinite(written_at):
        return LagTime(max(0.0, now - written_at), exact=True)
    if timeline is None:
        return LagTime(None)
    produced = timeline.produced_at(committed)
    if produced is None:
        return LagTime(None)
    at, estimated = produced
    seconds = now - at
    if not math.isfinite(seconds):
        return LagTime(None)
    return LagTime(max(0.0, seconds), estimated)


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
    measures = []
    by_topic: dict[str, list[PartitionMeasure]] = {}
    max_seconds: float | None = None
    estimated = False
    production: float | None = None  # sums over the committed partitions with a rate: None when none has one
    consumption: float | None = None
    # The figures are summed in this one pass: it runs per group-partition.
    for tp, p in zip(lag.tps, lag.partitions, strict=True):
        timeline = timelines.get(tp)
        committed = p.committed
        production_rate = None
        if timeline is not None:
            if tp in rates:
                production_rate = rates[tp]
            else:
                production_rate = rates[tp] = timeline.rate(since)
        progress = progresses.get(tp)
        log_end = p.log_end
        if committed is None or log_end is None:
            lag_time = UNKNOWN
        elif committed >= log_end:
            lag_time = CAUGHT_UP  # the common answers without a call (this runs for every group-partition)
        else:
            written_at = record_times.get((tp, committed)) if record_times else None
            lag_time = lag_seconds(timeline, committed, log_end, now, written_at)
        consumed = consumption_rate(progress, since, start) if progress is not None else None
        m = PartitionMeasure(p, lag_time, production_rate, consumed)
        measures.append(m)
        rows = by_topic.get(p.topic)
        if rows is None:
            by_topic[p.topic] = [m]
        else:
            rows.append(m)
        seconds = lag_time.seconds
        if seconds is not None and (max_seconds is None or seconds > max_seconds):
            max_seconds = seconds
        estimated = estimated or lag_time.estimated
        if committed is not None:
            if production_rate is not None:
                production = production_rate if production is None else production + production_rate
            if consumed is not None:
                consumption = consumed if consumption is None else consumption + consumed
    eta = None
    if lag.sum_lag > 0 and production is not None and consumption is not None and consumption > production:
        eta = lag.sum_lag / (consumption - production)
    return GroupMeasure(
        lag=lag,
        partitions=tuple(measures),
        max_lag_seconds=max_seconds,
        lag_seconds_estimated=estimated,
        production_rate=production,
        consumption_rate=consumption,
        eta_s=eta,
        by_topic={topic: tuple(rows) for topic, rows in by_topic.items()},
    )
