"""Rules on commit progress over a window: stalled, stopped, falling behind, rewound."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from lagwatch.history import Sample
from lagwatch.model import Finding, GroupKind, TopicPartition
from lagwatch.rules.context import GroupContext
from lagwatch.rules.text import duration, partitions


def _covered(samples: list[Sample], since: float) -> bool:
    return len(samples) >= 2 and samples[0].t <= since


def _lag(s: Sample) -> int | None:
    if s.committed is None or s.log_end is None:
        return None
    return max(0, s.log_end - s.committed)


def _has_members(ctx: GroupContext) -> bool:
    return len(ctx.group.members) > 0


def stalled(ctx: GroupContext) -> Iterator[Finding]:
    """Members are there, lag > 0, the log end moved over the window, the committed offset did not."""
    if not _has_members(ctx) or ctx.track is None:
        return
    by_topic: dict[str, list[int]] = {}
    for tp, progress in ctx.track.partitions.items():
        rules, _ = ctx.rules(tp.topic)
        if not rules.stalled.enabled:
            continue
        samples = progress.window(ctx.now - rules.stalled.window_s)
        if not _covered(samples, ctx.now - rules.stalled.window_s):
            continue
        committed = {s.committed for s in samples}
        ends = [s.log_end for s in samples if s.log_end is not None]
        last_lag = _lag(samples[-1])
        if len(committed) == 1 and None not in committed and ends and ends[-1] > ends[0] and last_lag:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
    for topic, parts in sorted(by_topic.items()):
        rules, _ = ctx.rules(topic)
        yield ctx.finding(
            "stalled",
            rules.stalled.severity,
            f"{ctx.group.group_id} has members but committed nothing on {partitions([(topic, p) for p in sorted(parts)])} "
            f"for {duration(rules.stalled.window_s)} while new records arrived",
            topic=topic,
            details={"partitions": sorted(parts), "window_s": rules.stalled.window_s},
            for_s=rules.stalled.for_s,
            runbook_url=rules.stalled.runbook_url,
        )


def stopped(ctx: GroupContext) -> Iterator[Finding]:
    """No consumer at all: an Empty group with lag (for longer than the window), or, for groups without
    membership (assign()), no commit progress over the window while lag grew."""
    rules, _ = ctx.rules()
    if not rules.stopped.enabled or ctx.track is None or ctx.measure.lag.sum_lag <= 0:
        return
    window = rules.stopped.window_s
    if ctx.group.kind is GroupKind.SIMPLE:
        if not _no_progress_while_lag_grows(ctx, window):
            return
        why = f"no commit for {duration(window)} while lag grew"
    elif ctx.group.state == "Empty" and ctx.group.kind in (GroupKind.CLASSIC, GroupKind.CONSUMER):
        since = ctx.track.empty_since.since if ctx.track.empty_since else ctx.now
        if ctx.now - since < window:
            return
        why = f"no members for {duration(ctx.now - since)}" + (
            "" if ctx.track.empty_since and ctx.track.empty_since.observed else " or more"
        )
    else:
        return
    yield ctx.finding(
        "stopped",
        rules.stopped.severity,
        f"{ctx.group.group_id} is not consuming ({why}) and lags {ctx.measure.lag.sum_lag} records",
        details={"lag": ctx.measure.lag.sum_lag, "state": ctx.group.state},
        for_s=rules.stopped.for_s,
        runbook_url=rules.stopped.runbook_url,
    )


def _group_lag_series(ctx: GroupContext, since: float) -> list[tuple[float, int]] | None:
    """Group lag at each poll time of the window (all partitions of a group are sampled in the same poll)."""
    assert ctx.track is not None
    by_time: dict[float, int] = {}
    for progress in ctx.track.partitions.values():
        samples = progress.window(since)
        if not _covered(samples, since):
            return None
        for s in samples:
            lag = _lag(s)
            if lag is not None:
                by_time[s.t] = by_time.get(s.t, 0) + lag
    series = sorted(by_time.items())
    return series if len(series) >= 2 else None


def _no_progress_while_lag_grows(ctx: GroupContext, window: float) -> bool:
    assert ctx.track is not None
    since = ctx.now - window
    for progress in ctx.track.partitions.values():
        samples = progress.window(since)
        if not _covered(samples, since) or len({s.committed for s in samples}) > 1:
            return False
    series = _group_lag_series(ctx, since)
    return series is not None and series[-1][1] > series[0][1]


def falling_behind(ctx: GroupContext) -> Iterator[Finding]:
    """Consuming, but slower than producing: lag grew through the whole window."""
    rules, _ = ctx.rules()
    if not rules.falling_behind.enabled or ctx.track is None:
        return
    m = ctx.measure
    if not m.consumption_rate or m.production_rate is None or m.consumption_rate >= m.production_rate:
        return  # a consumer making no progress at all is stalled or stopped, not falling behind
    series = _group_lag_series(ctx, ctx.now - rules.falling_behind.window_s)
    if series is None or series[-1][1] <= series[0][1]:
        return
    if any(later < earlier for (_, earlier), (_, later) in itertools.pairwise(series)):
        return
    yield ctx.finding(
        "falling_behind",
        rules.falling_behind.severity,
        f"{ctx.group.group_id} consumes {m.consumption_rate:.1f}/s while {m.production_rate:.1f}/s arrive: lag grew from "
        f"{series[0][1]} to {series[-1][1]} in {duration(series[-1][0] - series[0][0])} and will not catch up (ETA: never)",
        details={
            "lag": m.lag.sum_lag,
            "consumption_rate": m.consumption_rate,
            "production_rate": m.production_rate,
            "eta_s": None,
        },
        for_s=rules.falling_behind.for_s,
        runbook_url=rules.falling_behind.runbook_url,
    )


def rewind(ctx: GroupContext) -> Iterator[Finding]:
    if ctx.track is None:
        return
    by_topic: dict[str, list[tuple[TopicPartition, float, int, int]]] = {}
    for tp, (at, old, new) in ctx.track.rewinds.items():
        rules, _ = ctx.rules(tp.topic)
        if rules.rewind.enabled and ctx.now - at <= rules.rewind.window_s:
            by_topic.setdefault(tp.topic, []).append((tp, at, old, new))
    for topic, rows in sorted(by_topic.items()):
        rules, _ = ctx.rules(topic)
        moves = ", ".join(f"{tp.partition}: {old} -> {new}" for tp, _, old, new in sorted(rows))
        yield ctx.finding(
            "rewind",
            rules.rewind.severity,
            f"{ctx.group.group_id} moved its committed offset backwards on {topic} ({moves}): records will be consumed again",
            topic=topic,
            details={
                "partitions": [{"partition": tp.partition, "from": o, "to": n, "at": at} for tp, at, o, n in rows]
            },
            for_s=rules.rewind.for_s,
            runbook_url=rules.rewind.runbook_url,
        )
