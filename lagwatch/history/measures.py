"""Lag in seconds, production and consumption rates, and the catch-up ETA. Pure functions of history + now."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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
    production_rates: dict[tuple[TopicPartition, float], float | None] | None = None,
) -> GroupMeasure:
    """Rates are measured from `rate_since` (the rate window, cut short where observation was interrupted)."""
    since = rate_since
    timelines = history.timelines
    track = history.groups.get(lag.group.group_id)
    progresses = track.partitions if track is not None else {}
    consumption_rate = history.consumption_rate
    # Every group on a partition asks for the same rate: computed once per evaluation (and window start).
    rates = production_rates if production_rates is not None else {}
    measures = []
    for p in lag.partitions:
        tp = TopicPartition(p.topic, p.partition)
        timeline = timelines.get(tp)
        written_at = record_times.get((tp, p.committed)) if record_times and p.committed is not None else None
        production_rate = None
        if timeline is not None:
            rate_key = (tp, since)
            production_rate = rates.get(rate_key, rates)
            if production_rate is rates:  # not computed yet (None is an answer)
                production_rate = rates[rate_key] = timeline.rate(since)
        progress = progresses.get(tp)
        measures.append(
            PartitionMeasure(
                p,
                lag_seconds(timeline, p.committed, p.log_end, now, written_at),
                production_rate,  # type: ignore[arg-type]
                consumption_rate(progress, since) if progress is not None else None,
            )
        )
    known = [m.lag_time.seconds for m in measures if m.lag_time.seconds is not None]
    production = _sum_or_none(m.production_rate for m in measures if m.partition.committed is not None)
    consumption = _sum_or_none(m.consumption_rate for m in measures if m.partition.committed is not None)
    eta = None
    if lag.sum_lag > 0 and production is not None and consumption is not None and consumption > production:
        eta = lag.sum_lag / (consumption - production)
    return GroupMeasure(
        lag=lag,
        partitions=tuple(measures),
        max_lag_seconds=max(known) if known else None,
        lag_seconds_estimated=any(m.lag_time.estimated for m in measures),
        production_rate=production,
        consumption_rate=consumption,
        eta_s=eta,
        by_topic=_by_topic(measures),
    )


def _by_topic(measures: list[PartitionMeasure]) -> dict[str, tuple[PartitionMeasure, ...]]:
    grouped: dict[str, list[PartitionMeasure]] = {}
    for m in measures:
        grouped.setdefault(m.partition.topic, []).append(m)
    return {topic: tuple(rows) for topic, rows in grouped.items()}


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    items = [v for v in values if v is not None]
    return sum(items) if items else None
