"""Rules on commit progress over a window: stalled, no commit, stopped, falling behind, rewound.

Each judges a window only from evidence: when lagwatch did not watch the group for the whole window without a
blind spell (its polls failing for longer than max_gap_s, a restart, a group it could not read), the rule holds
its alert as it is, neither firing nor resolving it, until fresh polls cover the window again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from lagwatch.history import LONGEST_WAIT_KEPT_S, PartitionProgress, Sample, stall_threshold, trusted_cadence
from lagwatch.history.measures import FALLING_BEHIND_MARGIN
from lagwatch.model import Finding, GroupKind, TopicPartition
from lagwatch.rules import queue
from lagwatch.rules.context import GroupContext
from lagwatch.rules.text import duration, partitions

_STOPPED_KEYS = ("lag", "state")


class StoppedDetails(Mapping[str, Any]):
    """A `stopped` finding's details, {"lag", "state"}, as the alert book keeps them: 48 bytes, not a 184-byte dict
    (one per stopped group in a storm: 100,000 at 1M group-partitions in bench/daemon_step_bench.py, two alive
    while a poll's findings replace the last ones). Made a dict where they leave the process. Read-only."""

    __slots__ = _STOPPED_KEYS

    def __init__(self, lag: int, state: str) -> None:
        self.lag, self.state = lag, state

    def __getitem__(self, key: str) -> Any:
        if key == "lag":
            return self.lag
        if key == "state":
            return self.state
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(_STOPPED_KEYS)

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return repr(dict(self))


def _covered(samples: list[Sample], since: float) -> bool:
    return len(samples) >= 2 and samples[0].t <= since


def _lag(s: Sample) -> int | None:
    if s.committed is None or s.log_end is None:
        return None
    return max(0, s.log_end - s.committed)


# Kinds of groups whose coordinator knows their members: with none, nobody consumes.
_MEMBERSHIP = frozenset({GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.STREAMS, GroupKind.SHARE})


# Classic groups between two generations: members leave and join again, and a poll may see none at all.
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance"})


def _has_members(ctx: GroupContext) -> bool:
    return len(ctx.group.members) > 0


def _members_gone_lately(ctx: GroupContext, window_s: float) -> bool:
    """Every member gone (Empty) for less than `window_s`: a consumer crash-looping is seen between a crash and
    its restart at one poll in a few. Rules that need members hold their alerts through it (a crash loop flapped
    `stalled` fired and resolved at each restart: 16 notifications in 90 minutes); longer, `stopped` judges."""
    if ctx.group.members or ctx.group.state != "Empty":
        return False
    clock = ctx.history.empty_clock(ctx.group.group_id)
    return clock is not None and ctx.now - clock.since < window_s


def _between_generations(ctx: GroupContext) -> bool:
    """No members because a rebalance is under way: rules that need members cannot judge this poll (one such
    poll resolved a stuck consumer's alerts and paged them again at the next)."""
    return not ctx.group.members and ctx.group.state in REBALANCING


# Before a partition's commit cadence is known, in the first hour lagwatch watches its group, `stalled` waits
# twice its window (history.LEARNING_S): a sink that commits every 6 minutes is not paged while it is learnt. A
# group seen committing promptly from its start waits the window (GroupTrack.prompt).
# A longer cadence pages in that hour (a sink that flushes every 25 minutes, at 10 minutes): it cannot be told from
# a stall before its first wait is seen; nor is it learnt afterwards (waits longer than twice the window are not:
# they paged). A per-group `stalled.window_s` covers it.
def stall_wait(
    ctx: GroupContext, progress: PartitionProgress, window: float, learn: bool, topic: str | None = None
) -> float:
    """How long records may wait for a partition's commit before `stalled` pages it: the rule's window, or twice
    the partition's own commit cadence where that is longer (a healthy sink that flushes every few minutes keeps
    records waiting that long at every flush). With `topic`, a partition that does not commit at every poll counts
    the longest cadence its group's partitions of that topic learnt within the last day where that is longer: a
    sink flushes them all alike, and on a partition that gets a record every 20 minutes the waits seen are
    anything from a poll to the flush interval, or too few to know (it paged). Not one that commits at every poll
    (a busy partition's hang paged 10 minutes late), nor a cadence learnt long ago (a former sink's idle
    partition keeps its own)."""
    if not learn or ctx.track is None:
        return window
    cadence = trusted_cadence(progress.cadence_at(ctx.now), window)
    if topic is not None and (progress.short_since is None or ctx.now - progress.short_since < window):
        theirs = _topic_cadence(ctx, topic, window)
        if theirs is not None and (cadence is None or theirs > cadence):
            cadence = theirs
    return stall_threshold(window, cadence, ctx.track.learning(ctx.now))


def _topic_cadence(ctx: GroupContext, topic: str, window: float) -> float | None:
    """The longest cadence learnt within LONGEST_WAIT_KEPT_S by the group's partitions of `topic`; once per group,
    topic and poll (asked for each partition that waits: a walk per partition made a sink's step quadratic, 9 s at
    4,000 partitions)."""
    key = "topic_cadence:" + topic
    if key in ctx.memo:
        found: float | None = ctx.memo[key]
        return found
    assert ctx.track is not None
    found = None
    for tp, sibling in ctx.track.partitions.items():
        if tp.topic != topic or sibling.waits_at is None or ctx.now - sibling.waits_at >= LONGEST_WAIT_KEPT_S:
            continue
        theirs = trusted_cadence(sibling.cadence_at(ctx.now), window)
        if theirs is not None and (found is None or theirs > found):
            found = theirs
    ctx.memo[key] = found
    return found


def stalled(ctx: GroupContext) -> Iterator[Finding]:
    """Members are there, and a partition had records to consume at every poll of the window while its committed
    offset did not move. Quiet time with nothing to consume is not a stall. Where the partition's own cadence
    asks for longer than the window (stall_wait), the records must have waited that long too
    (_stalled_partition)."""
    if ctx.group.kind is GroupKind.SHARE:  # a queue: judged by its lag (rules.queue)
        yield from queue.stalled(ctx)
        return
    if ctx.track is None:
        return
    if _between_generations(ctx):
        for topic in {tp.topic for tp in ctx.track.partitions}:
            ctx.hold("stalled", topic)
        return
    if not _has_members(ctx):
        if _members_gone_lately(ctx, ctx.rules()[0].stalled.window_s):
            for topic_lag in ctx.measure.lag.topics:
                if topic_lag.sum_lag > 0:  # records still wait: nothing that ended a stall happened
                    ctx.hold("stalled", topic_lag.topic)
        return
    by_topic: dict[str, list[tuple[int, float, float | None]]] = {}  # partition, the wait it passed, its cadence
    moved: list[TopicPartition] = []  # partitions whose commit moved within the window: their consumer is alive
    history = ctx.history
    for tp, progress in ctx.track.partitions.items():
        rules, _ = ctx.rules(tp.topic)
        if not rules.stalled.enabled:
            continue
        window = rules.stalled.window_s
        if not ctx.covered(window):
            ctx.hold("stalled", tp.topic)
            continue
        aligned = history.aligned_window(progress, tp, history.window_start(ctx.now - window))
        if aligned is not None:  # the common case, without Sample objects: same answer as below
            committed_offsets, log_ends = aligned
            if committed_offsets[0] != committed_offsets[-1]:
                moved.append(tp)
            elif _waited_throughout(committed_offsets, log_ends):
                _stalled_partition(
                    ctx, tp, progress, committed_offsets[0], window, rules.stalled.learn_commit_interval, by_topic
                )
            continue
        samples = history.window(progress, tp, ctx.now - window)
        if not _covered(samples, ctx.now - window):
            # The polls kept do not reach back a window (its first polls, or after a restart at a longer poll
            # interval, its rings cut to fewer polls): it cannot tell, and a firing stall stays (it resolved, and
            # paged again a window later).
            ctx.hold("stalled", tp.topic)
            continue
        # A poll without the partition's commit (a partition-level OffsetFetch error) says nothing of it: the others
        # judge (one such poll resolved a firing stall and paged it again; one every 4 minutes hid a hang).
        known = [s for s in samples if s.committed is not None]
        committed = {s.committed for s in known}
        if len(committed) > 1:
            moved.append(tp)
        if len(known) >= 2 and len(committed) == 1:
            lags = [_lag(s) for s in known]
            if lags[0] and lags[-1] and all(lag is None or lag > 0 for lag in lags):
                # A poll without the log end between two with records waiting, the commit the same: they were still
                # waiting (a log end only grows). Such polls held the alert instead, and one in ten polls of a
                # leader election hid a hang for good. The newest poll must have read it: a partition without a
                # leader for an hour (nobody can fetch) paged its consumer `stalled`.
                (stuck,) = committed
                assert stuck is not None  # known
                _stalled_partition(ctx, tp, progress, stuck, window, rules.stalled.learn_commit_interval, by_topic)
            elif all(lag is None or lag > 0 for lag in lags):  # the window's first or newest poll without it
                ctx.hold("stalled", tp.topic)
    if by_topic and moved:
        _leave_out_members_that_progress(ctx, by_topic, moved)
    for topic, stalled_parts in sorted(by_topic.items()):
        if not stalled_parts:
            continue
        rules, _ = ctx.rules(topic)
        parts = sorted(p for p, _, _ in stalled_parts)
        waited = max(w for _, w, _ in stalled_parts)
        cadences = [c for _, _, c in stalled_parts if c is not None]
        cadence = max(cadences) if cadences else None
        said = (
            ""
            if cadence is None or waited <= rules.stalled.window_s
            else f" (it commits about every {duration(cadence)})"
        )
        yield ctx.finding(
            "stalled",
            rules.stalled.severity,
            f"{ctx.group.group_id} has members but committed nothing on {partitions([(topic, p) for p in parts])} "
            f"for {duration(waited)} although records were waiting the whole time{said}",
            topic=topic,
            details={
                "partitions": parts,
                "window_s": rules.stalled.window_s,
                "waited_s": waited,
                "commit_cadence_s": cadence,
            },
            for_s=rules.stalled.for_s,
            runbook_url=rules.stalled.runbook_url,
        )


def _leave_out_members_that_progress(
    ctx: GroupContext, by_topic: dict[str, list[tuple[int, float, float | None]]], moved: list[TopicPartition]
) -> None:
    """A group falling behind (its lag grew through the window while it committed) whose member committed on
    another of its partitions within the window is a slow consumer working through its partitions in turns: a
    partition waits its turn, minutes at a time, and is no hang. Not `stalled`, then: `falling_behind` and `lag`
    tell that story. The demo's slow consumer (10 records a second of 20) was paged critical `stalled` three times
    in ten minutes, each resolving at the partition's next commit. Still paged: a member whose every partition
    waits, one member of several that hangs while the others progress, and one partition that hangs while its
    member keeps up with the others (the group's lag then drops at their commits: it is not falling behind)."""
    if ctx.active_severity("falling_behind") is None:
        return
    owner = {tp: m.member_id for m in ctx.group.members for tp in m.assignment}
    alive = {owner[tp] for tp in moved if tp in owner}
    if not alive:
        return
    for topic, parts in by_topic.items():
        parts[:] = [p for p in parts if owner.get(TopicPartition(topic, p[0])) not in alive]


def _stalled_partition(
    ctx: GroupContext,
    tp: TopicPartition,
    progress: PartitionProgress,
    committed: int,
    window: float,
    learn: bool,
    by_topic: dict[str, list[tuple[int, float, float | None]]],
) -> None:
    """`tp` had records waiting and no commit over the whole window: stalled if they have waited longer than
    stall_wait too (the run of polls that saw them waiting; from the last commit when it reaches back past the
    polls kept). Not the time since the last commit: on a quiet topic that holds idle time, and a sink that
    flushes every 10 minutes paged a record that had waited 6."""
    last = progress.last_commit_change
    if last is None:
        return
    wait = stall_wait(ctx, progress, window, learn, tp.topic)
    if wait > window:  # the window check above is the whole answer otherwise
        newest = ctx.history.poll_times_first + len(ctx.history.poll_times) - 1
        since = ctx.history.waiting_since(progress, tp, newest, committed, last.since)
        if since is None:
            return
        if ctx.now - max(since, last.since) < wait:
            return
        # Only what lagwatch watched without a gap counts for a new stall: a broker outage held the consumer's
        # commit too (a sink flushing every 100 s was paged a minute after a 2-minute outage, its wait counted
        # across it). A stall already firing stays: its records still wait (it resolved after the gap, and paged
        # again once the wait had passed anew).
        watched = ctx.evidence_since
        if watched is not None and ctx.now - watched < wait:
            ctx.hold("stalled", tp.topic)
            return
    elif ctx.now - last.since < wait:
        return
    by_topic.setdefault(tp.topic, []).append((tp.partition, wait, progress.cadence_at(ctx.now)))


def no_commit(ctx: GroupContext) -> Iterator[Finding]:
    """Members are assigned a partition, records arrived on it over the whole window, and the group has no
    committed offset there at any poll of it: a consumer stuck before its first commit (or one that keeps its
    offsets elsewhere). Its lag cannot be measured (kafka-consumer-groups shows "-"), so no other rule pages it.
    The partition must have been assigned at the window's first poll and now (polls between, without members in
    a crash loop, are bridged: a commit then would still show): one of a topic just subscribed is not judged, nor
    is a quiet one (no record arrived: nothing to commit)."""
    lag = ctx.measure.lag
    track, committed = ctx.track, ctx.group.committed
    # Cheap first: every partition tracked or shown has a commit (nearly every group at every poll). A share group
    # commits nothing: a share-partition without a lag is one no consumer fetched from yet, or a broker before 4.2.
    if (
        ctx.group.kind is GroupKind.SHARE
        or track is None
        or (len(lag.tps) == len(committed) and len(track.partitions) == len(committed))
    ):
        return
    if _between_generations(ctx) or _members_gone_lately(ctx, ctx.rules()[0].no_commit.window_s):
        for topic in {tp.topic for tp in track.partitions}:  # nothing is assigned at this poll: it cannot tell
            ctx.hold("no_commit", topic)
        return
    if not _has_members(ctx):
        return
    by_topic: dict[str, list[tuple[int, int]]] = {}  # partition, records that arrived over the window
    shown = set(lag.tps)
    for tp, tracked in track.partitions.items():
        # Assigned to nobody at this poll (a hand-over under way): held, if it was assigned within the window (not
        # a topic no longer subscribed, or deleted: that alert never resolved).
        if (
            tp not in committed
            and tp not in shown
            and ctx.history.sampled_since(tracked, ctx.now - ctx.rules(tp.topic)[0].no_commit.window_s)
        ):
            ctx.hold("no_commit", tp.topic)
    for tp, row in zip(lag.tps, lag.partitions, strict=True):
        if row.committed is not None:
            continue
        if row.member_id is None:  # no member holds it at this poll: it cannot tell (it flapped at each one)
            ctx.hold("no_commit", tp.topic)
            continue
        rule = ctx.rules(tp.topic)[0].no_commit
        if not rule.enabled or rule.ignores(ctx.group.group_id):
            continue
        progress = track.partitions.get(tp)
        if progress is None:
            continue
        if not ctx.covered(rule.window_s):
            ctx.hold("no_commit", tp.topic)
            continue
        samples = ctx.history.window(progress, tp, ctx.now - rule.window_s)
        if not _covered(samples, ctx.now - rule.window_s) or samples[-1].log_end is None or samples[0].log_end is None:
            # Not assigned at the window's start within the polls kept (a crash loop's long Empty spells), or a
            # log end unread: it cannot tell, and a firing alert stays (it resolved, and paged again later).
            ctx.hold("no_commit", tp.topic)
            continue
        if any(s.committed is not None for s in samples):
            continue  # it committed within the window: `stalled` judges it
        arrived = samples[-1].log_end - samples[0].log_end
        if arrived > 0:
            by_topic.setdefault(tp.topic, []).append((tp.partition, arrived))
    for topic, rows in sorted(by_topic.items()):
        rule = ctx.rules(topic)[0].no_commit
        rows.sort()
        arrived = sum(n for _, n in rows)
        yield ctx.finding(
            "no_commit",
            rule.severity,
            f"{ctx.group.group_id} has members assigned {partitions([(topic, p) for p, _ in rows])} but no committed "
            f"offset there, although {arrived} records arrived in the last {duration(rule.window_s)}: its lag "
            "cannot be measured, and a restart would resume from auto.offset.reset",
            topic=topic,
            details={"partitions": [p for p, _ in rows], "records_arrived": arrived, "window_s": rule.window_s},
            for_s=rule.for_s,
            runbook_url=rule.runbook_url,
        )


def stopped(ctx: GroupContext) -> Iterator[Finding]:
    """No consumer at all: an Empty group with lag (for longer than the window), or, for groups without
    membership (assign(), Spark checkpoints), no commit progress over the window while lag grew."""
    rules, _ = ctx.rules()
    if not rules.stopped.enabled or ctx.track is None or ctx.measure.lag.sum_lag <= 0:
        return
    window = rules.stopped.window_s
    if ctx.group.kind in (GroupKind.SIMPLE, GroupKind.CHECKPOINT):
        if not ctx.covered(window):
            ctx.hold("stopped")
            return
        stopped_now = _no_progress_while_lag_grows(ctx, window)
        if stopped_now is None:  # the polls kept do not reach back a window: a firing `stopped` stays as it is
            ctx.hold("stopped")
            return
        if not stopped_now:
            return
        quiet = _since_last_commit(ctx)
        wait = _stop_wait(ctx, window)
        if quiet is not None and quiet < wait:
            # A committer on its own cadence (a Flink or Spark job committing at each checkpoint, every 3
            # minutes under a 2-minute window) fired and resolved at every cycle: it is stopped only once it has
            # gone twice its learnt cadence without a commit, as `stalled` waits for a sink.
            if ctx.active_severity("stopped") is not None:
                ctx.hold("stopped")  # a cadence learnt meanwhile lengthens the wait: it does not end the incident
            return
        why = f"no commit for {duration(window if quiet is None else quiet)} while lag grew"
    elif ctx.group.state == "Empty" and ctx.group.kind in _MEMBERSHIP:
        clock = ctx.history.empty_clock(ctx.group.group_id)
        since = clock.since if clock else ctx.now
        if ctx.now - since < window:
            ctx.hold("stopped")  # a crash loop's next Empty spell: the incident under way stays as it is
            return
        if not ctx.covered(window):
            ctx.hold("stopped")
            return
        waited = queue.waited_through if ctx.group.kind is GroupKind.SHARE else _lag_through
        if ctx.active_severity("stopped") is None and not waited(ctx, window):  # once: not at every poll
            # Empty a long time, and records only now: "Empty with lag for the window" (one record on a quiet
            # topic, or an operator's reset, which needs the group Empty, paged critical at once).
            ctx.hold("stopped")
            return
        why = f"no members for {duration(ctx.now - since)}" + ("" if clock and clock.observed else " or more")
    else:
        # Members are back. A consumer crash-looping is seen so between its Empty spells: a firing `stopped` is
        # held while records wait on what the members are assigned and either nothing was committed in the window,
        # or the lag did not drop over it and the group was Empty within five windows (it fired and resolved at
        # each restart: 33 notifications in 3 hours; 24 to 32 transitions when each run commits a little). Not
        # for lag only on a topic nobody consumes (it stayed up 6 hours), nor for a slow consumer that has stayed
        # (falling behind is then the story, and `stopped` inhibited it).
        if ctx.active_severity("stopped") is not None and _stopped_not_over(ctx, window):
            ctx.hold("stopped")
        return
    yield ctx.finding(
        "stopped",
        rules.stopped.severity,
        f"{ctx.group.group_id} is not consuming ({why}) and lags {ctx.measure.lag.sum_lag} records",
        details=StoppedDetails(ctx.measure.lag.sum_lag, ctx.group.state),
        for_s=rules.stopped.for_s,
        runbook_url=rules.stopped.runbook_url,
    )


def _waited_throughout(committed: Sequence[int], log_ends: Sequence[int]) -> bool:
    """From a window's aligned slices (`ClusterHistory.aligned_window`): the committed offset never moved, and
    records lay above it at every poll."""
    return min(committed) == max(committed) and min(log_ends) > committed[0]


def _lag_through(ctx: GroupContext, window: float) -> bool:
    """Whether some partition of the group had records waiting at its committed offset, unchanged, at every poll
    of the last `window` seconds. The window's slices where every poll sampled it (nearly always), the run of
    polls that saw records waiting otherwise."""
    assert ctx.track is not None
    history = ctx.history
    start = history.window_start(ctx.now - window)
    if start is None:
        return False
    newest = history.poll_times_first + len(history.poll_times) - 1
    committed_now = ctx.group.committed
    for tp, progress in ctx.track.partitions.items():
        aligned = history.aligned_window(progress, tp, start)
        if aligned is not None:
            if _waited_throughout(*aligned):
                return True
            continue
        row, last = committed_now.get(tp), progress.last_commit_change
        if row is None:
            continue
        since = history.waiting_since(progress, tp, newest, row.offset, -math.inf if last is None else last.since)
        if since is not None and since <= ctx.now - window:
            return True
    return False


def _since_last_commit(ctx: GroupContext) -> float | None:
    """Seconds since any of the group's committed offsets last moved (None: never seen to move)."""
    assert ctx.track is not None
    changes = [p.last_commit_change.since for p in ctx.track.partitions.values() if p.last_commit_change is not None]
    return ctx.now - max(changes) if changes else None


def _stop_wait(ctx: GroupContext, window: float) -> float:
    """How long a group without members may go without a commit, its lag growing, before it is `stopped`: the
    rule's window, or twice the commit cadence its partitions learnt (stall_threshold, with `stalled`'s own window,
    under which the history learns them) where that is longer; twice the window in its first hour."""
    assert ctx.track is not None
    stalled = ctx.rules()[0].stalled
    if not stalled.learn_commit_interval:
        return window
    cadences = [
        c
        for p in ctx.track.partitions.values()
        if (c := trusted_cadence(p.cadence_at(ctx.now), stalled.window_s)) is not None
    ]
    return stall_threshold(window, max(cadences, default=None), ctx.track.learning(ctx.now))


def _stopped_not_over(ctx: GroupContext, window: float) -> bool:
    assert ctx.track is not None
    rows = [(tp, row) for tp, row in zip(ctx.measure.lag.tps, ctx.measure.lag.partitions, strict=True) if row.member_id]
    if not any(row.lag for _, row in rows):
        return False  # nothing waits for the members: they are not stopped
    if not _committed_within(ctx, window):
        return True
    empty_at = ctx.track.last_empty_at
    if empty_at is None or ctx.now - empty_at >= 5 * window:
        return False
    first = last = 0
    for tp, _ in rows:
        progress = ctx.track.partitions.get(tp)
        samples = ctx.history.window(progress, tp, ctx.now - window) if progress is not None else []
        lags = (_lag(samples[0]), _lag(samples[-1])) if samples else (None, None)
        if lags[0] is None or lags[1] is None:
            return True  # it cannot tell
        first, last = first + lags[0], last + lags[1]
    return last >= first


def _read_within(ctx: GroupContext, window_s: float) -> bool:
    """Whether a partition whose log end is unread this poll was read within the last `window_s`."""
    for tp, row in zip(ctx.measure.lag.tps, ctx.measure.lag.partitions, strict=True):
        if row.log_end is None and row.committed is not None:
            read = ctx.history.last_read_log_end(tp)
            if read is not None and ctx.now - read[0] < window_s:
                return True
    return False


def _partly_read(samples: list[Sample]) -> bool:
    """A window in which some polls read the partition's log end and some did not (an election under way)."""
    return any(s.log_end is None for s in samples) and any(s.log_end is not None for s in samples)


def _committed_within(ctx: GroupContext, window_s: float) -> bool:
    """Whether any of the group's committed offsets moved in the last `window_s`."""
    assert ctx.track is not None
    since = ctx.now - window_s
    return any(
        p.last_commit_change is not None and p.last_commit_change.since > since for p in ctx.track.partitions.values()
    )


def _windows(ctx: GroupContext, since: float) -> list[list[Sample]] | None:
    """Every partition's window, or None when one is not covered."""
    assert ctx.track is not None
    windows = []
    for tp, progress in ctx.track.partitions.items():
        samples = ctx.history.window(progress, tp, since)
        if not _covered(samples, since):
            return None
        windows.append(samples)
    return windows


class GroupPoint(NamedTuple):
    t: float  # the poll's time
    lag: int  # the group's lag where it is known
    committed: int  # the sum of the same partitions' committed offsets


def _group_series(windows: list[list[Sample]]) -> list[GroupPoint] | None:
    """The group's points at each poll of the windows: its lag where it is known. A partition counts from its
    first known lag in the window on (it joins the sums then), if its lag is known at every poll after that; one
    whose lag went unknown after being known is left out whole (its drop is no consumer's doing). Only the
    partitions known throughout were summed before: a consumer that commits its partitions one at a time was
    judged on the first ones alone, whose dips held `falling_behind` back until the window passed the last one's
    first commit (45 s late at 15-s polls)."""
    times = sorted({s.t for samples in windows for s in samples})
    lag = dict.fromkeys(times, 0)
    committed = dict.fromkeys(times, 0)
    counted = 0
    for samples in windows:
        if len(samples) != len(times) or [s.t for s in samples] != times:
            continue
        lags = [_lag(s) for s in samples]
        first = next((i for i, behind in enumerate(lags) if behind is not None), None)
        if first is None or None in lags[first:]:
            continue  # never known, or known and then not: left out
        counted += 1
        for s, behind in zip(samples[first:], lags[first:], strict=True):
            lag[s.t] += behind or 0
            committed[s.t] += s.committed or 0
    if counted == 0 or len(times) < 2:
        return None
    return [GroupPoint(t, lag[t], committed[t]) for t in times]


def _no_progress_while_lag_grows(ctx: GroupContext, window: float) -> bool | None:
    """Whether no committed offset moved over the window while the group's lag grew; None when it cannot tell
    (a partition's polls kept do not reach back a window)."""
    fast = _no_progress_while_lag_grows_aligned(ctx, window)
    if fast is not None:
        return fast
    windows = _windows(ctx, ctx.now - window)  # built once: the check below and the series read the same ones
    if windows is None:
        return None
    if any(len({s.committed for s in samples}) > 1 for samples in windows):
        return False
    series = _group_series(windows)
    return series is not None and series[-1].lag > series[0].lag


def _no_progress_while_lag_grows_aligned(ctx: GroupContext, window: float) -> bool | None:
    """The answer of `_no_progress_while_lag_grows` from array slices when every partition's window is aligned
    (every poll of it sampled both values; then all windows share the same polls and every partition counts in
    the series); None when one is not, for the general path to decide. A partition that committed within its
    window decides alone (False), as in the general path, whatever the others' windows are."""
    assert ctx.track is not None
    history = ctx.history
    lags = history.aligned_group_lags(ctx.track.partitions, history.window_start(ctx.now - window))
    if lags is None or lags == "moved":
        return None if lags is None else False
    first_lag, last_lag = lags
    return last_lag > first_lag


# A step of commits: Kafka's default auto.commit.interval.ms. Lag read between two commits of a consumer that keeps
# up holds up to this much of production.
COMMIT_STEP_S = 5.0


def falling_behind(ctx: GroupContext) -> Iterator[Finding]:
    """Consuming, but slower than producing: lag grew through the whole window (in its first half and in its
    second, never dropping), and the group committed throughout (no pause of half the window). A group with nobody
    consuming is `stopped`'s story, one that hung `stalled`'s, not this one's."""
    rules, _ = ctx.rules()
    if not rules.falling_behind.enabled or ctx.track is None:
        return
    if _between_generations(ctx):
        ctx.hold("falling_behind")
        return
    if ctx.group.kind in _MEMBERSHIP and not _has_members(ctx):
        if ctx.measure.lag.sum_lag > 0 and (
            ctx.active_severity("stopped") is not None
            or _members_gone_lately(ctx, 2 * _stop_wait(ctx, rules.stopped.window_s))
        ):
            # Its consumer left with records waiting: `stopped`'s story once its wait has passed. A firing
            # `falling_behind` is held till then and while `stopped` lasts (muted by it): it resolved as the
            # consumer left, and the log said "resolved" seconds before `stopped` paged.
            ctx.hold("falling_behind")
        return
    window = rules.falling_behind.window_s
    if not ctx.covered(window):
        ctx.hold("falling_behind")
        return
    m = ctx.measure
    if m.lag.unknown and _read_within(ctx, window):
        # A log end unread this poll, read within the window (an election): it cannot tell (it resolved, and
        # fired again). Unread longer (a partition without a leader for hours), the rest is judged: held, it
        # stayed up 5 hours after the consumer had caught up.
        ctx.hold("falling_behind")
        return
    if not m.consumption_rate or m.production_rate is None or m.consumption_rate >= m.production_rate:
        return  # a consumer making no progress at all is stalled or stopped, not falling behind
    windows = _windows(ctx, ctx.now - window)
    series = _group_series(windows) if windows is not None else None
    if series is None or any(_partly_read(w) for w in windows or ()):
        ctx.hold("falling_behind")  # a poll of the window without a log end drops its partition from the sums
        return
    if len(series) < 3 or any(later.lag < earlier.lag for earlier, later in itertools.pairwise(series)):
        return  # (fewer than three polls cannot grow steadily: first < middle < last below)
    first, last = series[0], series[-1]
    if ctx.group.kind is GroupKind.SHARE and queue.hung([p.lag for p in series], [p.committed for p in series]):
        return  # a queue's position drifts by a few records under production: a hung one is `stalled`'s
    middle = max((row for row in series if row.t <= ctx.now - window / 2), key=lambda row: row.t)
    first_lag, mid_lag, last_lag = first.lag, middle.lag, last.lag
    mid_committed, last_committed = middle.committed, last.committed
    span = last.t - first.t
    # A step of commits, or a tenth of a window shorter than 50 s; not once firing: a consumer slower by about
    # that much fired and resolved in turns on the noise of its commits.
    step = min(COMMIT_STEP_S, span / 10) if ctx.active_severity("falling_behind") is None else 0.0
    if (last_lag - first_lag) < m.production_rate * max(FALLING_BEHIND_MARGIN * span, step):
        # Grown by less than a sliver of what was produced meanwhile (the demo's fast consumer, 19.8/s against
        # 19.8/s, its lag 5 growing to 7 in a minute, was paged and resolved 35 s later), or by less than what
        # arrives in one step of commits: a consumer that keeps up shows that much as lag between its commits (the
        # demo's assign() consumer, 2.6/s against 2.6/s, its lag 0 growing to 4 in a minute, was paged and resolved
        # 35 s later).
        return
    if not first_lag < mid_lag < last_lag or last_committed <= mid_committed or _longest_pause(series) >= window / 2:
        # Steadily, too: a consumer that hung for most of the window and committed again just now averaged
        # "0.2/s while 19.8/s arrive", fired, and resolved a poll later as it caught up (a hang is `stalled`'s).
        return
    yield ctx.finding(
        "falling_behind",
        rules.falling_behind.severity,
        f"{ctx.group.group_id} consumes {m.consumption_rate:.1f}/s while {m.production_rate:.1f}/s arrive: lag grew from "
        f"{first.lag} to {last.lag} in {duration(last.t - first.t)} and will not catch up (ETA: never)",
        details={
            "lag": m.lag.sum_lag,
            "consumption_rate": m.consumption_rate,
            "production_rate": m.production_rate,
            "eta_s": None,
        },
        for_s=rules.falling_behind.for_s,
        runbook_url=rules.falling_behind.runbook_url,
    )


def _longest_pause(series: list[GroupPoint]) -> float:
    """The longest stretch of a group's series without a move of the committed offsets."""
    longest, since, before = 0.0, series[0].t, series[0].committed
    for t, _, committed in series[1:]:
        if committed != before:
            longest, since, before = max(longest, t - since), t, committed
    return max(longest, series[-1][0] - since)


def rewind(ctx: GroupContext) -> Iterator[Finding]:
    if ctx.track is None or ctx.group.kind is GroupKind.SHARE:  # a queue's position is no commit (rules.queue)
        return
    by_topic: dict[str, list[tuple[TopicPartition, float, int, int]]] = {}
    for tp, (at, old, new) in ctx.track.rewinds.items():
        rules, _ = ctx.rules(tp.topic)
        if rules.rewind.enabled and ctx.now - at <= rules.rewind.window_s:
            by_topic.setdefault(tp.topic, []).append((tp, at, old, new))
    for topic, rows in sorted(by_topic.items()):
        rules, _ = ctx.rules(topic)
        rows.sort()  # by partition in the summary and the details alike, whatever order the rewinds were seen in
        moves = ", ".join(f"{tp.partition}: {old} -> {new}" for tp, _, old, new in rows)
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
