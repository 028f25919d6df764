"""What lagwatch has seen of one cluster over time: log-end timelines, commit progress, and the clocks that
decide offset expiry (when a group became Empty, when each committed offset last changed).

Two sources feed the clocks: polls (what changed between two polls, so a clock is only as exact as the poll
interval) and, where lagwatch may read `__consumer_offsets`, the coordinator's own records (`observe_records`: the
exact commit timestamp of every commit, also of the same offset committed again, and when a group became Empty).

Evidence: a window-based rule may only judge a window that lagwatch watched without a blind spell (a gap longer
than `max_gap_s` between good polls: a restart of lagwatch, an outage, failed polls in a row; a poll held after
the clock went back; or a group that could not be read).
`evidence_since` is where the current unbroken stretch of observation began.

Pure: every method takes `now` (or a snapshot carrying its time) and does no I/O. What it keeps per group and
partition is in tracks.py, the clocks read from `__consumer_offsets` in exact_clocks.py, the saved document in
codec.py.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mypy_extensions import mypyc_attr

from lagwatch.history.codec import (
    ArrayReader,
    ArrayWriter,
    HistoryCapture,
    PartitionColumns,
    clock_from_json,
    track_from_json,
    track_to_json,
)
from lagwatch.history.exact_clocks import ExactClocks
from lagwatch.history.rings import NO_VALUE, NOT_SAMPLED, PollRing
from lagwatch.history.timeline import LogEndTimeline
from lagwatch.history.tracks import (
    COMMIT_WAITS_KEPT,
    LONGEST_WAIT_KEPT_S,
    Clock,
    GroupTrack,
    PartitionProgress,
    Sample,
    Vanished,
    stall_threshold,
    trusted_cadence,
)
from lagwatch.model import ClusterSnapshot, GroupKind, GroupSnapshot, PartitionOffsets, TopicPartition
from lagwatch.offsets_topic import (
    Record,
)

HISTORY_SCHEMA_VERSION = 3  # 3: samples as per-poll rings (poll times per cluster, log ends per partition)
_NO_ENDS: array[int] = array("q")
MAX_SAMPLES = 64  # polls of samples kept unless the daemon sizes them to its rules (polls_to_keep)
MIN_SAMPLES = 8
VANISHED_KEEP_S = 3600.0  # how long a vanished group or offset is remembered (to report it expired)
DEFAULT_STALL_WINDOW_S = 300.0  # the stalled window when no rules are given (ClusterHistory.stall_window_of)


def polls_to_keep(longest_window_s: float, poll_interval_s: float) -> int:
    """How many polls the rings must keep for the longest window a rule reads (its start is the last poll at or
    before it, plus one spare for a poll that came late). Fewer polls than that, and a window is never covered:
    its rule would never judge; more, and each group-partition holds 8 bytes a poll for nothing."""
    return max(MIN_SAMPLES, math.ceil(longest_window_s / poll_interval_s) + 2)


_UNASKED: Any = object()  # a partition whose log-end bounds were not asked yet at this poll


def _aligned(ring: PollRing | None, start: int, newest: int) -> array[int] | None:
    """The ring's values from poll `start` to the newest when it sampled a value at every one of them, else None
    (a gap, a missing value: the sentinels are below every offset)."""
    if ring is None or ring.first > start or ring.first + len(ring.values) - 1 != newest:
        return None
    values = ring.values[start - ring.first :]
    return values if min(values) > NO_VALUE else None


# Subclassed by tests that force one path of the window rules; compiled (setup.py), that must be allowed.
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class ClusterHistory:
    cluster: str
    timelines: dict[TopicPartition, LogEndTimeline] = field(default_factory=dict)
    groups: dict[str, GroupTrack] = field(default_factory=dict)
    last_ok_poll: float | None = None
    polls: int = 0
    # A longer gap between two good polls is a blind spell (lagwatch was down, or polls were skipped).
    max_gap_s: float = float("inf")
    keep: int = MAX_SAMPLES  # polls kept in the rings (the daemon sizes it to its rules: polls_to_keep)
    # The stalled window of a group and partition, or None where stalled does not learn cadences (the pipeline
    # gives its rules'); not saved.
    stall_window_of: Callable[[str, TopicPartition], float | None] | None = field(
        default=None, repr=False, compare=False
    )
    evidence_since: float | None = None
    blind: bool = False  # a poll was held since the last one taken (dated before it: the clock went back)
    # Partitions whose log end was not read at the poll that ended a blind spell: resumed when next read. Saved:
    # a restart shorter than max_gap_s is no blind spell of its own (its growth was spread back, and paged).
    resume_owed: set[TopicPartition] = field(default_factory=set, repr=False, compare=False)
    exact: ExactClocks = field(default_factory=ExactClocks)
    # The times of the last MAX_SAMPLES good polls (poll number `poll_times_first` first), and each partition's
    # log end at those polls: every group's samples share them.
    poll_times: array[float] = field(default_factory=lambda: array("d"))
    poll_times_first: int = 1
    log_ends: dict[TopicPartition, PollRing] = field(default_factory=dict)
    # aligned_group_lags' log-end bounds at the newest poll (`_bounds_newest`), per window start and partition.
    _bounds: dict[int, dict[TopicPartition, tuple[int, int] | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _bounds_newest: int = field(default=0, init=False, repr=False, compare=False)
    # Clock(now, observed=False) and Clock(now, observed=True) of the poll being observed (`observe`).
    _clocks: tuple[Clock, Clock] = field(
        default=(Clock(0.0, False), Clock(0.0, True)), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Set here too: compiled (setup.py), a dataclass does not take the default of an init=False field.
        self._bounds_newest = 0
        self._clocks = (Clock(0.0, False), Clock(0.0, True))

    def window(self, progress: PartitionProgress, tp: TopicPartition, since: float) -> list[Sample]:
        """`tp`'s samples from the last one at or before `since` to now (so the window is fully covered); all of
        them when none is that old. Walks back from the newest: a window is a few samples of up to 64."""
        times, t0 = self.poll_times, self.poll_times_first
        values, first = progress.values, progress.first
        ends = self.log_ends.get(tp)
        end_values, end_first = (ends.values, ends.first) if ends is not None else (_NO_ENDS, 0)
        out = []
        for i in range(len(values) - 1, max(0, t0 - first) - 1, -1):  # newest first, as far back as times go
            raw = values[i]
            if raw == NOT_SAMPLED:
                continue
            poll = first + i
            t = times[poll - t0]
            j = poll - end_first
            end = end_values[j] if 0 <= j < len(end_values) else NOT_SAMPLED
            out.append(Sample(t, None if raw == NO_VALUE else raw, None if end <= NO_VALUE else end))
            if t <= since:
                break
        out.reverse()
        return out

    def last_read_log_end(self, tp: TopicPartition) -> tuple[float, int] | None:
        """When `tp`'s log end was last read, and what it was (where consuming ends, as the polls kept read it;
        else the timeline's newest point). None: never read."""
        ring = self.log_ends.get(tp)
        if ring is not None:
            values, t0 = ring.values, self.poll_times_first
            for i in range(len(values) - 1, -1, -1):
                if values[i] > NO_VALUE and 0 <= ring.first + i - t0 < len(self.poll_times):
                    return self.poll_times[ring.first + i - t0], values[i]
        timeline = self.timelines.get(tp)
        if timeline is not None and timeline.ends:
            return timeline.times[-1], timeline.ends[-1]
        return None

    def sampled_since(self, progress: PartitionProgress, since: float) -> bool:
        """Whether a poll at or after `since` sampled this group-partition (committed, or assigned)."""
        ring, t0, times = progress, self.poll_times_first, self.poll_times
        for i in range(len(ring.values) - 1, -1, -1):
            if ring.values[i] != NOT_SAMPLED:
                at = ring.first + i - t0
                return 0 <= at < len(times) and times[at] >= since
        return False

    def window_start(self, since: float) -> int | None:
        """The poll number of the last poll at or before `since` (None: no poll kept is that old)."""
        index = bisect_right(self.poll_times, since) - 1
        return None if index < 0 else self.poll_times_first + index

    def aligned_window(
        self, progress: PartitionProgress, tp: TopicPartition, start: int | None
    ) -> tuple[array[int], array[int]] | None:
        """`window(progress, tp, since)` as two arrays (committed offsets, log ends), for the common case in which
        every poll from `start` (window_start(since)) to the newest sampled both values: then they are exactly
        that window's samples, none missing. None in every other case (a gap, a missing value, too little
        history): the caller takes `window()`. The window rules ask this for every group-partition at every poll;
        two array slices cost a tenth of the Sample objects."""
        newest = self.poll_times_first + len(self.poll_times) - 1
        if start is None or start >= newest:
            return None
        committed = _aligned(progress, start, newest)
        log_ends = _aligned(self.log_ends.get(tp), start, newest)
        if committed is None or log_ends is None:
            return None
        return committed, log_ends

    def aligned_group_lags(
        self, partitions: dict[TopicPartition, PartitionProgress], start: int | None
    ) -> tuple[int, int] | Literal["moved"] | None:
        """A group's summed lag at poll `start` and at the newest, from `aligned_window`'s slices: None when one
        partition's window is not aligned (the caller takes the Sample path), "moved" when a partition's committed
        offset changed within its window (that decides alone, whatever the others' windows are: the checks come
        in aligned_window's order). Its log ends are looked at once per partition and poll, not per group."""
        newest = self.poll_times_first + len(self.poll_times) - 1
        if start is None or start >= newest:
            return None if partitions else (0, 0)  # aligned_window's answer for each of them: none
        if newest != self._bounds_newest:
            self._bounds.clear()
            self._bounds_newest = newest
        bounds = self._bounds.get(start)
        if bounds is None:
            bounds = self._bounds[start] = {}
        first_lag = last_lag = 0
        for tp, progress in partitions.items():
            # _aligned inlined: one count() tells both "sampled at every poll" and "never moved" when the
            # committed offset stayed put, as it does for the groups this rule is about (min() only otherwise).
            first, values = progress.first, progress.values
            if first > start or first + len(values) - 1 != newest:
                return None
            committed = values[start - first :]
            offset = committed[-1]
            still = committed.count(offset) == len(committed)
            if (offset if still else min(committed)) <= NO_VALUE:
                return None  # a poll without a sample, or without a commit
            ends = bounds.get(tp, _UNASKED)
            if ends is _UNASKED:
                log_ends = _aligned(self.log_ends.get(tp), start, newest)
                ends = bounds[tp] = None if log_ends is None else (log_ends[0], log_ends[-1])
            if ends is None:
                return None
            if not still:
                return "moved"
            first_end, last_end = ends
            first_lag += first_end - offset if first_end > offset else 0
            last_lag += last_end - offset if last_end > offset else 0
        return first_lag, last_lag

    def consumption_rate(self, progress: PartitionProgress, since: float, start: int | None = None) -> float | None:
        """Committed records/s from the last sample at or before `since` to the newest (samples without a commit
        skipped). Builds no list (this runs for every group-partition at every poll). `start`: window_start(since),
        when the caller has it (a group's partitions share it)."""
        times, t0 = self.poll_times, self.poll_times_first
        values, first = progress.values, progress.first
        # Mostly the newest sample and the one at `since` both hold a commit: then they are the answer, and the
        # walk below (a step per poll of the window, 20 at 30 s polls and 10 minutes) is not needed.
        if start is None:
            start = t0 + bisect_right(times, since) - 1  # the poll at or before `since` (t0 - 1: none)
        if values and start >= t0 and start >= first:
            newest = first + len(values) - 1
            if newest >= t0 and start < newest:
                begin, end = values[start - first], values[-1]
                if begin > NO_VALUE and end > NO_VALUE:
                    begin_t, end_t = times[start - t0], times[newest - t0]
                    if end_t <= begin_t:
                        return None
                    return (end - begin) / (end_t - begin_t) if end > begin else 0.0
        last_t = first_t = 0.0
        last = first_value = None
        for i in range(len(values) - 1, max(0, t0 - first) - 1, -1):
            raw = values[i]
            if raw == NOT_SAMPLED:
                continue
            t = times[first + i - t0]
            if raw != NO_VALUE:
                if last is None:
                    last, last_t = raw, t
                first_value, first_t = raw, t
            if t <= since:
                break
        if first_value is None or last is None or last_t <= first_t:
            return None
        return max(0.0, (last - first_value) / (last_t - first_t))

    def observe_records(self, records: Iterable[Record], caught_up: bool, lead_s: float = 0.0) -> None:
        """Folds in records read from `__consumer_offsets`, in the topic's order (`lead_s`: ExactClocks.apply)."""
        for record in records:
            self.exact.apply(record, lead_s)
        self.exact.ready = self.exact.ready or caught_up

    def observe(self, snapshot: ClusterSnapshot) -> bool:
        """Folds one poll in. A failed poll changes nothing: an outage must not look like vanished offsets. Evidence
        starts again only after a gap longer than `max_gap_s` between good polls: one failed poll in three or four
        (a flaky network) restarted it every time, so no window was ever covered and nothing paged, ever.
        Returns True when this poll ends a blind spell (evidence starts again from it)."""
        if not snapshot.ok:
            return False
        now = snapshot.taken_at
        self.polls += 1
        resumed = self.last_ok_poll is not None and (self.blind or now - self.last_ok_poll > self.max_gap_s)
        if resumed or self.evidence_since is None:
            self.evidence_since = now
        self.blind = False
        self.poll_times.append(now)
        keep = self.keep
        excess = len(self.poll_times) - keep
        if excess > 0:
            del self.poll_times[:excess]
            self.poll_times_first += excess
        poll = self.poll_times_first + len(self.poll_times) - 1
        resume_owed = self.resume_owed
        if resumed:
            # A partition whose log end is not read at this poll (a leader election after an outage) takes what its
            # log grew by at the first poll that reads it: spread back over the spell, a burst at its end read as
            # 28 minutes behind a consumer 3 minutes behind, and paged.
            resume_owed.update(self.timelines)
        for tp, offsets in snapshot.partitions.items():
            ends = self.log_ends.get(tp)
            if ends is None:
                ends = self.log_ends[tp] = PollRing()
            # Where consuming ends: below the log end when only transaction markers follow (consumable_end), so
            # that a window of a consumer caught up below them has no lag in it.
            consumable = offsets.consumable_end
            ends.put(poll, offsets.log_end if consumable is None else consumable, keep)
            if offsets.log_end is not None:
                timeline = self.timelines.get(tp)
                if timeline is None:
                    timeline = self.timelines[tp] = LogEndTimeline()
                if resumed or (resume_owed and tp in resume_owed):
                    timeline.resume(now)
                    resume_owed.discard(tp)
                timeline.add(now, offsets.log_end)
        seen = set()
        # The clocks this poll sets, one of each shared by every partition it sets them on (frozen values): a
        # Clock per group-partition was 56 bytes each, 50 MB at 1M group-partitions.
        self._clocks = (Clock(now, observed=False), Clock(now, observed=True))
        # The poll's time as the snapshot's own float object, which every group's track keeps (compiled, setup.py,
        # a float argument is a machine number, and each track got a float object of its own: 5 MB at 1M).
        at: Any = cast(Any, snapshot).taken_at
        for group in snapshot.groups:
            seen.add(group.group_id)
            if group.error is None:
                self._observe_group(group, at, poll, snapshot.partitions)
            elif group.group_id in self.groups:
                self.groups[group.group_id].unreadable = True
        for group_id, track in self.groups.items():
            if group_id not in seen and track.gone_since is None:
                track.gone_since = now
                last = {tp: c for tp, p in track.partitions.items() if (c := p.last_committed) is not None}
                if last:
                    track.vanished = Vanished(now, last, group_gone=True, clocks=self._expiry_clocks(group_id, last))
        if snapshot.missing_topics:
            self._forget_deleted_topics(snapshot.missing_topics)
        self._evict(snapshot, now)
        self.exact.removed_commits.clear()
        self.exact.removed_empty_since.clear()
        self.last_ok_poll = now
        return resumed

    def commit_clock(self, group_id: str, tp: TopicPartition) -> Clock | None:
        """When `tp`'s committed offset was last committed. The coordinator's own commit time where it was read
        (also for the same offset committed again); else when a poll saw the offset change."""
        clocks = self.commit_clocks(group_id, (tp,))
        return clocks[0][1] if clocks else None

    def commit_clocks(self, group_id: str, tps: Iterable[TopicPartition]) -> list[tuple[TopicPartition, Clock]]:
        """(tp, commit_clock(group_id, tp)) for each of `tps` that has one, in their order, with the group's own
        lookups made once (the expiry outlook asks for every committed partition of a group at every poll)."""
        track = self.groups.get(group_id)
        progresses = track.partitions if track else {}
        ready = self.exact.ready
        # ExactClocks.commit_time inlined, its group's lookup made once: it is interpreted, and was a call per
        # group-partition at every poll (0.1 s a step at 1M group-partitions, most with no exact clock at all).
        commits = self.exact.commits.get(group_id)
        removed = self.exact.removed_commits
        clocks = []
        for tp in tps:
            progress = progresses.get(tp)
            polled = progress.last_commit_change if progress is not None else None
            exact = commits.get(tp) if commits else None
            if exact is None and removed:
                exact = removed.get((group_id, tp))
            if exact is None:
                clock = polled
            elif polled is not None and polled.observed and polled.since > exact:
                clock = polled  # committed again after the last record read: the poll saw it first
            elif not ready:  # the reader is still catching up: a later commit of it may not be read yet
                clock = polled if polled is not None and polled.since > exact else Clock(exact, observed=False)
            else:
                clock = Clock(exact, observed=True)
            if clock is not None:
                clocks.append((tp, clock))
        return clocks

    def empty_clock(self, group_id: str) -> Clock | None:
        """When this (classic) group became Empty: from its group metadata record where read, else as polled."""
        exact = self.exact.group_empty_since(group_id)
        track = self.groups.get(group_id)
        polled = track.empty_since if track else None
        if exact is None:
            return polled
        if not self.exact.ready:  # catching up: the group may have become Empty again since, in records not read
            return polled if polled is not None and polled.since > exact else Clock(exact, observed=False)
        return Clock(exact, observed=True)

    def _expiry_clocks(self, group_id: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, Clock]:
        track = self.groups.get(group_id)
        empty = self.empty_clock(group_id) if track and track.kind == "classic" and track.state == "Empty" else None
        clocks = {}
        for tp in offsets:
            clock = empty or self.commit_clock(group_id, tp)
            if clock is not None:
                clocks[tp] = clock
        return clocks

    def evidence_start(self, group_id: str) -> float | None:
        """Since when this group has been watched without a blind spell; None if never."""
        track = self.groups.get(group_id)
        if track is None or track.evidence_since is None or self.evidence_since is None:
            return None
        return max(track.evidence_since, self.evidence_since)

    def _observe_group(
        self, group: GroupSnapshot, now: Any, poll: int, logs: Mapping[TopicPartition, PartitionOffsets]
    ) -> None:
        """`now`: the poll's time (a float)."""
        first_look = group.group_id not in self.groups
        # Not there at the last poll, watched without a gap since before it: made since (ListGroups failing on a
        # broker fails the poll; a group it leaves out is kept from the poll before, collect.poll).
        new_group = first_look and self.evidence_since is not None and self.evidence_since < now
        track = self.groups.get(group.group_id)
        if track is None or track.gone_since is not None:
            track = GroupTrack(kind=group.kind.value, state=group.state, members=len(group.members), first_seen=now)
            self.groups[group.group_id] = track
        if track.evidence_since is None or track.unreadable:
            track.evidence_since = now
        track.unreadable = False
        track.kind, track.members = group.kind.value, len(group.members)
        was_empty = track.state == "Empty" and track.empty_since is not None and not first_look
        if group.state == "Empty":
            track.last_empty_at = now
            if track.empty_since is None:
                # Seen becoming Empty only if lagwatch saw it in another state before.
                track.empty_since = Clock(now, observed=not first_look and track.state != "Empty")
        else:
            track.empty_since = None
        track.state = group.state

        assigned = {tp for m in group.members for tp in m.assignment}
        committed_now = group.committed
        partitions = track.partitions
        # Offsets committed at the last sample and not now: vanished (read before this poll's samples go in).
        # Not an offset of a topic a member is assigned or subscribes to: Kafka expires no offset of a group with
        # members on a topic it subscribes to; one missing is a poll without it (a partition-level OffsetFetch
        # error), which paged `expired` and resolved it a poll later (mid-rebalance, with no assignment yet, too).
        # A share group's positions are no commits (rules.queue): one without a lag this poll vanished nowhere.
        absent = [tp for tp in partitions if tp not in committed_now] if group.kind is not GroupKind.SHARE else []
        dropped = [(tp, partitions[tp].last_committed) for tp in group.unsubscribed(absent)] if absent else []
        # A commit last seen before the previous poll ended a wait of more than a poll: only then is it looked at
        # (a consumer that commits all the time costs one comparison a partition).
        times = self.poll_times
        previous_poll_t = times[-2] if len(times) > 1 else math.inf
        clocks = self._clocks
        for tp in {*committed_now, *assigned} if assigned else committed_now:
            committed = committed_now.get(tp)
            offset = committed.offset if committed is not None else None
            progress = partitions.get(tp)
            if progress is None:  # not setdefault: that would build a PartitionProgress on every poll
                progress = partitions[tp] = PartitionProgress()
            ring = progress  # its own ring of committed offsets
            if offset is not None:
                previous = ring.last
                if previous <= NO_VALUE and offset == next((v for v in reversed(ring.values) if v > NO_VALUE), None):
                    # A poll without this partition's commit (a partition-level OffsetFetch error), and the same
                    # offset before and after it: nothing happened (that poll restarted a hung consumer's clock).
                    # A different one is taken as new (a topic deleted and made again: no rewind of the old one).
                    pass
                elif previous <= NO_VALUE:  # no sample yet, or nothing committed at the last one
                    if not track.prompt and progress.last_commit_change is None:
                        if ring.values and not first_look:  # assigned without a commit at earlier polls
                            track.prompt = self._first_commit_prompt(group.group_id, tp, ring.first, poll)
                        elif new_group:  # the group was not there at the last poll, and has committed already
                            track.prompt = self._new_group_prompt(group.group_id, tp, offset, logs.get(tp))
                    progress.last_commit_change = clocks[bool(ring.values) and not first_look]
                elif offset != previous:
                    last = progress.last_commit_change
                    if last is not None and last.since < previous_poll_t:
                        short_run = 0.0 if progress.short_since is None else last.since - progress.short_since
                        if last.observed:
                            self._commit_wait(group.group_id, progress, tp, poll, previous, now, last.since, short_run)
                        progress.short_since = None
                    elif progress.short_since is None:
                        progress.short_since = now
                    progress.last_commit_change = clocks[True]
                    if offset < previous and not self._log_went_back(tp, ring.first + len(ring.values) - 1, poll):
                        track.rewinds[tp] = (now, previous, offset)
                    if (
                        was_empty
                        and group.state == "Empty"
                        and group.kind is GroupKind.CLASSIC
                        and committed is not None
                        and committed.leader_epoch is not None
                    ):
                        # Empty at both polls, yet a consumer's commit moved (it carries the epoch of the records
                        # it read; an admin's --reset-offsets does not, and leaves Kafka's clock where it was): a
                        # short job joined, committed and left in between, and the group became Empty again since.
                        # When is not known: the latest possible moment (this poll) gives the latest expiry.
                        track.empty_since = Clock(now, observed=False)
            ring.put(poll, offset, self.keep)
        gone_offsets = {tp: o for tp, o in dropped if o is not None}
        if gone_offsets or track.missing:
            self._vanish(group.group_id, track, gone_offsets, now)

    def _vanish(self, group_id: str, track: GroupTrack, gone: dict[TopicPartition, int], now: float) -> None:
        """Offsets missing from this poll's answer: vanished if the last poll missed them too, dated from then. One
        answer without them is no proof: an Empty group's offsets left out of one OffsetFetch answer, and back
        unchanged at the next, resolved its `stopped` (paged again a window later) and reported them `expired`."""
        missed_at = track.missing or {}
        confirmed = {tp: o for tp, o in gone.items() if tp in missed_at}
        track.missing = {tp: now for tp in gone if tp not in missed_at} or None  # those back are forgotten
        if confirmed:
            at = min(missed_at[tp] for tp in confirmed)
            track.vanished = Vanished(at, confirmed, group_gone=False, clocks=self._expiry_clocks(group_id, confirmed))
            for tp in confirmed:  # none is assigned (`dropped` leaves those out)
                del track.partitions[tp]

    def _first_commit_prompt(self, group_id: str, tp: TopicPartition, since_poll: int, poll: int) -> bool:
        """Whether a first commit seen at `poll` on `tp`, assigned without one since `since_poll`, was prompt:
        within half the stall window, records arriving meanwhile (on a quiet topic a consumer may commit its start
        position at once, sink or not)."""
        window = self._stall_window(group_id, tp)
        times, ends, t0 = self.poll_times, self.log_ends.get(tp), self.poll_times_first
        if window is None or ends is None or not (t0 <= since_poll < poll and ends.first <= since_poll):
            return False
        if times[poll - t0] - times[since_poll - t0] > window / 2 or ends.first + len(ends.values) - 1 != poll:
            return False
        before, after = ends.values[since_poll - ends.first], ends.values[-1]
        return NO_VALUE < before < after

    def _new_group_prompt(self, group_id: str, tp: TopicPartition, offset: int, log: PartitionOffsets | None) -> bool:
        """Whether a group not there at the last poll, and committed on `tp` already, committed promptly: the polls
        are less than half the stall window apart, and the commit is past records (not an empty log's start; the
        log end at the last poll is not known: nobody watched consumed the topic then)."""
        window = self._stall_window(group_id, tp)
        times = self.poll_times
        if window is None or len(times) < 2 or times[-1] - times[-2] > window / 2:
            return False
        return log is not None and log.log_start is not None and offset > log.log_start

    def _stall_window(self, group_id: str, tp: TopicPartition) -> float | None:
        return self.stall_window_of(group_id, tp) if self.stall_window_of is not None else DEFAULT_STALL_WINDOW_S

    def _log_went_back(self, tp: TopicPartition, since_poll: int, poll: int) -> bool:
        """Whether `tp`'s log end is lower at `poll` than at `since_poll`: the topic deleted and made again (or its
        log cut by an unclean election). A committed offset lower then is the new log's, not a consumer going
        back: a topic re-created between two polls paged `rewind` ("records will be consumed again": none would)."""
        ends = self.log_ends.get(tp)
        if ends is None:
            return False
        values, first = ends.values, ends.first
        if not first <= since_poll < poll < first + len(values):
            return False
        before, now = values[since_poll - first], values[poll - first]
        return before > NO_VALUE and now > NO_VALUE and now < before

    def _commit_wait(
        self,
        group_id: str,
        progress: PartitionProgress,
        tp: TopicPartition,
        poll: int,
        previous: int,
        now: float,
        last_change: float,
        short_run: float,
    ) -> None:
        """The commit of `tp` seen at this poll ended a wait of more than a poll: how long records had been
        waiting for it (`waiting_since` at the poll before) goes into the partition's waits, if it is known (not
        from before the kept polls: that counted a quiet topic's idle hours), no longer than twice the window (a
        longer one paged), and after a run of commits a poll apart (`short_run` s) no longer than that either
        (SHORT_RUN_FORGETS_S). A consumer that commits as soon as a record comes is caught up at
        polls (the time between records is no cadence), and a commit seen first after a blind spell is no
        measure: neither is recorded."""
        evidence = self.evidence_start(group_id)
        if evidence is None or last_change <= evidence:
            return
        since = self.waiting_since(progress, tp, poll - 1, previous, last_change)
        if since is None or since == -math.inf:
            return
        window = self._stall_window(group_id, tp)
        if window is None:
            return
        if now - since <= 2 * window and short_run <= 2 * window:
            wait = now - since
            # Kept a day only if it did not page: a batch consumer's hang that paged, kept, made its next hangs
            # that day page 17 minutes late (the latest waits let go of it after five more).
            cadence = trusted_cadence(progress.cadence_at(now), window)
            paged = wait > stall_threshold(window, cadence, self.groups[group_id].learning(now))
            progress.waits = (*progress.waits[1 - COMMIT_WAITS_KEPT :], wait)
            progress.waits_at = now
            at = progress.longest_wait_at
            if not paged:
                if at is None or now - at >= LONGEST_WAIT_KEPT_S:
                    progress.longest_wait, progress.longest_wait_at = wait, now
                elif wait >= 0.8 * progress.longest_wait:  # about as long again (the next night): a day more
                    progress.longest_wait, progress.longest_wait_at = max(wait, progress.longest_wait), now

    def waiting_since(
        self, progress: PartitionProgress, tp: TopicPartition, poll: int, committed: int, last_change: float
    ) -> float | None:
        """Since when records have waited for `tp`'s commit, as of poll number `poll` (its committed offset then:
        `committed`, last changed at `last_change`): the time of the first poll of the unbroken run of polls up to
        it that saw records waiting. None: none waiting at `poll`. A poll that did not read the log end or sample
        the partition is bridged: log ends only grow, so records waiting on both sides of it waited through it
        (taken as the end of the run, it cut a sink's 8-minute wait to 30 s). -inf: waiting since before the
        polls kept (how long is not known)."""
        ring, ends = progress, self.log_ends.get(tp)
        if ends is None:
            return None
        times, t0 = self.poll_times, self.poll_times_first
        since: float | None = None
        at = poll
        while True:
            i, j = at - ring.first, at - ends.first
            if at < t0 or i < 0 or j < 0 or i >= len(ring.values) or j >= len(ends.values):
                return -math.inf if since is not None else None  # waiting as far back as the polls kept go
            t = times[at - t0]
            if t <= last_change:
                return since  # the last commit's poll: the run starts after it
            value, end = ring.values[i], ends.values[j]
            at -= 1
            if value <= NO_VALUE or end <= NO_VALUE:
                continue
            if value != committed or end <= committed:
                return since  # nothing waiting at that poll: the run starts after it
            since = t

    def forget_unwatched(self, group_watched: Callable[[str], bool], topic_watched: Callable[[str], bool]) -> int:
        """Lets go of the groups and topics the cluster's filters no longer watch (a filter narrowed between two
        runs): missing from the next poll, they read as deleted or expired, and every one of them paged `expired`
        for an hour. Returns how many group-partitions went."""
        dropped = 0
        for group_id in [g for g in self.groups if not group_watched(g)]:
            dropped += len(self.groups.pop(group_id).partitions)
        for track in self.groups.values():
            for tp in [tp for tp in track.partitions if not topic_watched(tp.topic)]:
                del track.partitions[tp]
                track.rewinds.pop(tp, None)
                dropped += 1
            v = track.vanished
            if v is not None and any(not topic_watched(tp.topic) for tp in v.offsets):
                kept = {tp: o for tp, o in v.offsets.items() if topic_watched(tp.topic)}
                track.vanished = Vanished(v.at, kept, v.group_gone, v.clocks) if kept else None
        for tp in [tp for tp in (*self.timelines, *self.log_ends) if not topic_watched(tp.topic)]:
            self.timelines.pop(tp, None)
            self.log_ends.pop(tp, None)
            self.resume_owed.discard(tp)
        return dropped

    def _forget_deleted_topics(self, topics: frozenset[str]) -> None:
        """Offsets of a deleted topic vanish with it: a deletion, not an expiry."""
        for track in self.groups.values():
            missing = track.missing
            if missing and any(tp.topic in topics for tp in missing):
                for tp in [tp for tp in missing if tp.topic in topics]:  # gone with it: not to vanish next poll
                    del missing[tp]
                    track.partitions.pop(tp, None)
                track.missing = missing or None
            v = track.vanished
            if v is not None and any(tp.topic in topics for tp in v.offsets):
                kept = {tp: o for tp, o in v.offsets.items() if tp.topic not in topics}
                track.vanished = Vanished(v.at, kept, v.group_gone, v.clocks) if kept else None

    def _evict(self, snapshot: ClusterSnapshot, now: float) -> None:
        for group_id in [
            g for g, t in self.groups.items() if t.gone_since is not None and now - t.gone_since > VANISHED_KEEP_S
        ]:
            del self.groups[group_id]
        for track in self.groups.values():
            if track.vanished and now - track.vanished.at > VANISHED_KEEP_S:
                track.vanished = None
            for tp in [tp for tp, (at, _, _) in track.rewinds.items() if now - at > VANISHED_KEEP_S]:
                del track.rewinds[tp]
        # Partitions this poll did not read, kept only while a group still holds them. Mostly there are none, and
        # the set of every group's partitions (100k at 100k group-partitions) is not built.
        unread = [tp for tp in (*self.timelines, *self.log_ends) if tp not in snapshot.partitions]
        if unread:
            needed = {tp for t in self.groups.values() if t.gone_since is None for tp in t.partitions}
            for tp in unread:
                if tp not in needed:
                    self.timelines.pop(tp, None)
                    self.log_ends.pop(tp, None)
                    self.resume_owed.discard(tp)

    # -- persistence (plain JSON-able data) --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-able document. The per-poll values (rings, timelines) go into one compressed binary `arrays`
        field, in the order the document names them: at 100k group-partitions, JSON lists of numbers were 90% of
        a save's time."""
        return self.capture().to_json()

    def capture(self) -> HistoryCapture:
        """The history as it is now, detached from it: the part of a save that must see the history unchanging.
        The arrays are compressed straight from the history's own, a megabyte at a time (joined first, they were
        a transient copy of 18 MB at 100k group-partitions, the daemon's peak RSS); encoding and writing can
        then happen elsewhere."""
        arrays = ArrayWriter()
        document = {
            "schema_version": HISTORY_SCHEMA_VERSION,
            "cluster": self.cluster,
            "last_ok_poll": self.last_ok_poll,
            "polls": self.polls,
            "evidence_since": self.evidence_since,
            "blind": self.blind,
            # Optional (saves before it have none): a restart shorter than max_gap_s is no blind spell of its own.
            "resume_owed": [[tp.topic, tp.partition] for tp in self.resume_owed],
            "poll_times_first": self.poll_times_first,
            "poll_times": list(self.poll_times),
            "timelines": [
                [tp.topic, tp.partition, arrays.add(tl.times), arrays.add(tl.ends)] for tp, tl in self.timelines.items()
            ],
            "log_ends": [[tp.topic, tp.partition, r.first, arrays.add(r.values)] for tp, r in self.log_ends.items()],
            "groups": {g: track_to_json(t, arrays.columns) for g, t in self.groups.items()},
            "group_partitions": len(arrays.columns.partition),
            "byteorder": "little",
        }
        return HistoryCapture(document, arrays.compressed())  # last: after every array was named above

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterHistory:
        """Reads schema 1 to 3 (1 and 2: samples as lists, migrated to rings). Damage raises ValueError, KeyError
        or TypeError."""
        version = data.get("schema_version", 1)  # 1: before evidence and exact clocks; read as they are
        if not isinstance(version, int) or version > HISTORY_SCHEMA_VERSION:
            raise ValueError(f"history schema version {version!r}: written by a newer lagwatch")
        history = cls(
            cluster=data["cluster"],
            last_ok_poll=data.get("last_ok_poll"),
            polls=data.get("polls", 0),
            evidence_since=data.get("evidence_since"),
            blind=bool(data.get("blind", False)),
        )
        history.resume_owed = {TopicPartition(str(t), int(p)) for t, p in data.get("resume_owed", ())}
        if version < 3:
            _read_v2(history, data)
            return history
        arrays = ArrayReader(data["arrays"], data["byteorder"])
        history.poll_times_first = int(data["poll_times_first"])
        history.poll_times = array("d", (float(t) for t in data["poll_times"]))
        for topic, partition, n_times, n_ends in data["timelines"]:
            history.timelines[TopicPartition(topic, partition)] = LogEndTimeline(
                times=arrays.take("d", n_times), ends=arrays.take("q", n_ends)
            )
        for topic, partition, first, n in data["log_ends"]:
            history.log_ends[TopicPartition(topic, partition)] = PollRing(int(first), arrays.take("q", n))
        columns = PartitionColumns.read(arrays, int(data["group_partitions"]))
        for group_id, raw in data["groups"].items():
            history.groups[group_id] = track_from_json(raw, columns)
        arrays.done()
        return history


def _read_v2(history: ClusterHistory, data: dict[str, Any]) -> None:
    """Schema 1 and 2 kept a list of [time, committed, log end] per group-partition: the rings take the newest
    MAX_SAMPLES poll times found in them, and each partition's log end at those polls."""
    for topic, partition, points in data.get("timelines", []):
        history.timelines[TopicPartition(topic, partition)] = LogEndTimeline.from_json(points)
    groups = data.get("groups", {})
    times = sorted(
        {float(t) for raw in groups.values() for *_, samples in raw.get("partitions", []) for t, _, _ in samples}
    )
    times = times[-MAX_SAMPLES:]
    history.poll_times = array("d", times)
    history.poll_times_first = max(history.polls, len(times)) - len(times) + 1
    poll_of = {t: history.poll_times_first + i for i, t in enumerate(times)}
    ends: dict[TopicPartition, dict[int, int | None]] = {}
    for group_id, raw in groups.items():
        track = track_from_json(raw, None)
        for topic, partition, clock, samples in raw.get("partitions", []):
            tp = TopicPartition(topic, partition)
            progress = track.partitions[tp] = PartitionProgress(last_commit_change=clock_from_json(clock))
            for t, committed, log_end in samples:
                poll = poll_of.get(float(t))
                if poll is not None:
                    progress.put(poll, committed, MAX_SAMPLES)
                    ends.setdefault(tp, {})[poll] = log_end
        history.groups[group_id] = track
    for tp, by_poll in ends.items():
        ring = history.log_ends[tp] = PollRing()
        for poll in sorted(by_poll):
            ring.put(poll, by_poll[poll], MAX_SAMPLES)
