"""Share groups (KIP-932 queues): `stalled` and `stopped` from the broker's lag, not from commits.

A share group commits nothing. Its coordinator reports, per share-partition, the records not yet delivered to
completion (KIP-1226: available, acquired and not acknowledged, released); lagwatch keeps as the group's position
the log end minus that lag (collect.poll._share_positions), so the lag it shows is the broker's to the record. That
position is not a commit: it is computed against lagwatch's own log end, read a moment after the coordinator's, so
under production it runs a few records ahead of the queue's true one and moves while nothing was delivered. Rules
that read commits (a stall as an unchanged offset, a rewind as one that went back) would see a hung queue move and
a healthy one go back. Here a queue's lag judges, and its position only in bulk over a window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from lagwatch.history import PartitionProgress
from lagwatch.model import Finding, TopicPartition
from lagwatch.rules.context import GroupContext
from lagwatch.rules.text import duration, partitions

# Records delivered over a window, as a share of those that arrived, under which a queue with members counts as
# stalled: a consumer delivering anything near its share of the arrivals falls behind at worst (`falling_behind`),
# and a slow one delivers some (a job of 25 s a record, one record in flight, was paged critical when one record
# more was allowed for the drift below).
STALL_DELIVERED_SHARE = 0.01
# The position runs ahead of the queue's true one by what arrives between the coordinator's read of the log end and
# lagwatch's, and DescribeShareGroupOffsets took 2.1-2.4 s on a loaded broker (the others 1-5 ms): 5 to 20 records
# a window at 10 records/s, well over 1%, and a hung queue's `stalled` fired and resolved 5 times in 5 minutes. The
# drift only adds: the least of a few polls' positions at each end of the window is as near the truth as the
# quickest of those polls.
DRIFT_POLLS = 3


def next_to_nothing(delivered: int, arrived: int) -> bool:
    return delivered <= STALL_DELIVERED_SHARE * max(arrived, 0)


def delivered(positions: Sequence[int]) -> int:
    """Records delivered over a window, from its positions at each poll (DRIFT_POLLS)."""
    k = max(1, min(DRIFT_POLLS, len(positions) // 2))
    return max(0, min(positions[-k:]) - min(positions[:k]))


def _window_lags(
    ctx: GroupContext, progress: PartitionProgress, tp: TopicPartition, window: float
) -> tuple[list[int], int, int] | None:
    """The partition's lag at every poll of the last `window` seconds, with the records delivered and arrived
    over it; None where a poll of it is missing a figure, or the polls kept do not reach back that far."""
    samples = ctx.history.window(progress, tp, ctx.now - window)
    if len(samples) < 2 or samples[0].t > ctx.now - window:
        return None
    lags: list[int] = []
    positions: list[int] = []
    for s in samples:
        if s.committed is None or s.log_end is None:
            return None
        lags.append(max(0, s.log_end - s.committed))
        positions.append(s.committed)
    first, last = samples[0], samples[-1]
    assert first.log_end is not None and last.log_end is not None
    return lags, delivered(positions), last.log_end - first.log_end


def stalled(ctx: GroupContext) -> Iterator[Finding]:
    """A share group with members on which records waited at every poll of the window (lag never 0) while next to
    nothing was delivered (next_to_nothing: drift aside, nothing): consumers
    hung, holding records unacknowledged, or rejecting nothing and accepting nothing."""
    if ctx.track is None:
        return
    if not ctx.group.members:
        # Every member gone: `stopped` judges after its window. Gone for less, a crash loop's restart may be under
        # way; or lagwatch was not watching all through the window (a restart): `stopped` cannot judge yet, and a
        # stall resolved then was a false all-clear followed by a `stopped` page. A firing stall stays while
        # records wait.
        clock = ctx.history.empty_clock(ctx.group.group_id)
        window = ctx.rules()[0].stalled.window_s
        if (clock is not None and ctx.now - clock.since < window) or not ctx.covered(window):
            for topic_lag in ctx.measure.lag.topics:
                if topic_lag.sum_lag > 0:
                    ctx.hold("stalled", topic_lag.topic)
        return
    by_topic: dict[str, list[tuple[int, int, int, int]]] = {}  # partition, lag now, delivered, arrived
    for tp, progress in ctx.track.partitions.items():
        rule = ctx.rules(tp.topic)[0].stalled
        if not rule.enabled:
            continue
        if not ctx.covered(rule.window_s):
            ctx.hold("stalled", tp.topic)
            continue
        seen = _window_lags(ctx, progress, tp, rule.window_s)
        if seen is None:
            ctx.hold("stalled", tp.topic)  # it cannot tell: a firing stall stays as it is
            continue
        lags, done, arrived = seen
        if min(lags) > 0 and next_to_nothing(done, arrived):
            by_topic.setdefault(tp.topic, []).append((tp.partition, lags[-1], done, arrived))
    for topic, rows in sorted(by_topic.items()):
        rule = ctx.rules(topic)[0].stalled
        rows.sort()
        waiting = sum(r[1] for r in rows)
        done = sum(r[2] for r in rows)
        arrived = sum(r[3] for r in rows)
        said = "nothing" if done == 0 else f"{done} of the {arrived} records that arrived"
        yield ctx.finding(
            "stalled",
            rule.severity,
            f"{ctx.group.group_id} has members but delivered {said} on {partitions([(topic, r[0]) for r in rows])} "
            f"in the last {duration(rule.window_s)}, while {waiting} records wait (held unacknowledged, or not taken)",
            topic=topic,
            details={
                "partitions": [r[0] for r in rows],
                "window_s": rule.window_s,
                "lag": waiting,
                "delivered": done,
                "arrived": arrived,
            },
            for_s=rule.for_s,
            runbook_url=rule.runbook_url,
        )


def hung(lags: Sequence[int], positions: Sequence[int]) -> bool:
    """From a window's sums of lag and position at each poll: next to nothing delivered, as `stalled` counts it."""
    arrived = (lags[-1] + positions[-1]) - (lags[0] + positions[0])  # log end = lag + position
    return next_to_nothing(delivered(positions), arrived)


def waited_through(ctx: GroupContext, window: float) -> bool:
    """Whether records waited on some partition of the share group at every poll of the last `window` seconds
    (`stopped`: an Empty queue with records waiting for the window, not one that got a record just now)."""
    assert ctx.track is not None
    for tp, progress in ctx.track.partitions.items():
        seen = _window_lags(ctx, progress, tp, window)
        if seen is not None and min(seen[0]) > 0:
            return True
    return False
