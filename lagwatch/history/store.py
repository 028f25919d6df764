"""What lagwatch has seen of one cluster over time: log-end timelines, commit progress, and the clocks that
decide offset expiry (when a group became Empty, when each committed offset last changed).

Two sources feed the clocks: polls (what changed between two polls, so a clock is only as exact as the poll
interval) and, where lagwatch may read `__consumer_offsets`, the coordinator's own records (`observe_records`: the
exact commit timestamp of every commit, also of the same offset committed again, and when a group became Empty).

Evidence: a window-based rule may only judge a window that lagwatch watched without a blind spell (a gap longer
than `max_gap_s` between good polls: a restart of lagwatch, an outage, failed polls in a row; a poll held after
the clock went back; or a group that could not be read).
`evidence_since` is where the current unbroken stretch of observation began.

Pure: every method takes `now` (or a snapshot carrying its time) and does no I/O.
"""

from __future__ import annotations

import base64
import math
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from lagwatch.history.rings import NO_VALUE, NOT_SAMPLED, PollRing
from lagwatch.history.timeline import LogEndTimeline
from lagwatch.model import ClusterSnapshot, GroupKind, GroupSnapshot, TopicPartition
from lagwatch.offsets_topic import (
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    Record,
    Undecodable,
)

HISTORY_SCHEMA_VERSION = 3  # 3: samples as per-poll rings (poll times per cluster, log ends per partition)
_NO_ENDS: array[int] = array("q")
MAX_SAMPLES = 64  # polls of samples kept unless the daemon sizes them to its rules (polls_to_keep)
MIN_SAMPLES = 8
VANISHED_KEEP_S = 3600.0  # how long a vanished group or offset is remembered (to report it expired)
COMMIT_WAITS_KEPT = 5  # a partition's latest waits for a commit with records waiting: its commit cadence
COMMIT_WAITS_NEEDED = 3  # fewer, and the cadence is not known yet
# A wait is learnt only after a run of commits a poll apart no longer than twice the window (a sink's second
# commit after a flush, a batch consumer's burst), not after a long one (a busy consumer's hang: a stall, paged;
# learnt, it hid the next ones). A cadence is not used once such a run has lasted this long (a former sink).
SHORT_RUN_FORGETS_S = 3600.0
# The longest wait learnt is remembered this long beside the latest ones: a sink that flushes by size or by time
# flushes every 3 minutes by day and every 9 at night, and five short day waits made each night's first flush a
# page. A day and an hour: the next night is covered.
LONGEST_WAIT_KEPT_S = 25 * 3600.0
DEFAULT_STALL_WINDOW_S = 300.0  # the stalled window when no rules are given (ClusterHistory.stall_window_of)
# Before a partition's commit cadence is known, in the first hour lagwatch watches its group, `stalled` waits
# twice its window: a sink that commits every 6 minutes is not paged under a 5-minute window while it is learnt.
LEARNING_S = 3600.0


def stall_threshold(window: float, cadence: float | None, first_seen: float, now: float) -> float:
    """How long records may wait for a partition's commit before `stalled` pages it: the rule's window, or twice
    the partition's own cadence where that is longer; twice the window while it is learnt in the group's first
    hour. Used by the rule, and by the history to learn only waits that did not page (a hang that paged, learnt,
    made the next ones go unpaged)."""
    if cadence is not None:
        return max(window, 2 * cadence)
    return 2 * window if now - first_seen < LEARNING_S else window


def trusted_cadence(cadence: float | None, window: float) -> float | None:
    """A cadence longer than twice the window was never learnt (saved by an earlier build): not trusted."""
    return None if cadence is not None and cadence > 2 * window else cadence


def polls_to_keep(longest_window_s: float, poll_interval_s: float) -> int:
    """How many polls the rings must keep for the longest window a rule reads (its start is the last poll at or
    before it, plus one spare for a poll that came late). Fewer polls than that, and a window is never covered:
    its rule would never judge; more, and each group-partition holds 8 bytes a poll for nothing."""
    return max(MIN_SAMPLES, math.ceil(longest_window_s / poll_interval_s) + 2)


class Sample(NamedTuple):
    """One poll's view of a group-partition, built on demand for the window rules (a NamedTuple: built 2.7x faster
    than a frozen dataclass, and a window of a busy group is thousands of them)."""

    t: float
    committed: int | None
    log_end: int | None


@dataclass(frozen=True, slots=True)
class Clock:
    """A moment lagwatch saw (`observed`), or the first time it looked (`observed=False`): the true moment may be
    earlier. Rules that must warn early, never late, treat an unobserved clock as the earliest possible time."""

    since: float
    observed: bool


@dataclass(frozen=True, slots=True)
class Vanished:
    """Committed offsets that disappeared although the group is still there (or its whole group vanished)."""

    at: float
    offsets: dict[TopicPartition, int]
    group_gone: bool
    # The clock each offset's expiry counted from when it vanished (None: unknown): expired, or deleted early?
    clocks: dict[TopicPartition, Clock] = field(default_factory=dict)


@dataclass(slots=True)
class PartitionProgress:
    """A group-partition's committed offset at each poll that sampled it (times and log ends: ClusterHistory)."""

    committed: PollRing = field(default_factory=PollRing)
    last_commit_change: Clock | None = None
    # How long records waited for this partition's commit, the last few times it took longer than a poll (a sink
    # that flushes every 6 minutes): seconds from the first poll that saw records waiting to the poll that saw the
    # commit, within unbroken observation, no longer than twice the window and not after a long run of commits a
    # poll apart (a wait that long, or a busy consumer's hang, was a stall that paged: learnt, it made the next
    # ones page later). Empty for a consumer that commits at every poll or as soon as a record comes: `stalled`
    # then waits its window; else twice the longest of them.
    waits: tuple[float, ...] = ()
    waits_at: float | None = None  # when the last of them was learnt
    longest_wait: float = 0.0  # the longest learnt within LONGEST_WAIT_KEPT_S (0: none)
    longest_wait_at: float | None = None  # when it was learnt
    # When the current run of commits a poll after the one before began (None: the last commit took longer).
    short_since: float | None = None

    @property
    def commit_cadence(self) -> float | None:
        """The longest of the latest waits (None: too few seen yet). The longest, not a middle one: on a quiet
        topic the wait of each flush is anything from a poll to the flush interval, and `stalled` compares the
        wait under way with it."""
        waits = self.waits
        return max(waits) if len(waits) >= COMMIT_WAITS_NEEDED else None

    def cadence_at(self, now: float) -> float | None:
        """commit_cadence, for paging, unless the partition has committed at every poll for SHORT_RUN_FORGETS_S
        (a sink that became a consumer committing at every poll learns no new wait, and its old cadence held its
        hangs back for good). Not aged by time alone: a sink's topic idle for a night keeps its cadence."""
        cadence = self.commit_cadence
        if cadence is None or (self.short_since is not None and now - self.short_since > SHORT_RUN_FORGETS_S):
            return None
        at = self.longest_wait_at
        if at is not None and now - at < LONGEST_WAIT_KEPT_S and self.longest_wait > cadence:
            return self.longest_wait  # a longer wait within the last day: a daily cycle's longest flush
        return cadence

    @property
    def last_committed(self) -> int | None:
        """The committed offset at the newest sample (None: no sample, or none committed then)."""
        raw = self.committed.last
        return None if raw <= NO_VALUE else raw


@dataclass
class GroupTrack:
    kind: str
    state: str
    members: int
    first_seen: float
    empty_since: Clock | None = None
    partitions: dict[TopicPartition, PartitionProgress] = field(default_factory=dict)
    rewinds: dict[TopicPartition, tuple[float, int, int]] = field(default_factory=dict)  # at, from, to
    vanished: Vanished | None = None
    gone_since: float | None = None
    evidence_since: float | None = None  # start of the unbroken stretch in which this group was read every poll
    unreadable: bool = False  # the last poll could not read this group: the next one starts fresh evidence
    last_empty_at: float | None = None  # the last poll that saw it Empty (a crash loop's members come and go)


@dataclass
class ExactClocks:
    """Clocks read from `__consumer_offsets`: exact commit times and the moment each classic group became Empty.
    `ready` once the reader has caught up with the topic's end (before that, absent entries mean "not read yet")."""

    commits: dict[str, dict[TopicPartition, float]] = field(default_factory=dict)  # group -> tp -> commit time (s)
    empty_since: dict[str, float] = field(default_factory=dict)  # classic groups written Empty, with the time
    ready: bool = False
    records: int = 0
    undecodable: int = 0
    removed_commits: dict[tuple[str, TopicPartition], float] = field(default_factory=dict)
    removed_empty_since: dict[str, float] = field(default_factory=dict)
    _interned: dict[tuple[str, int], TopicPartition] = field(default_factory=dict, repr=False)

    def commit_time(self, group: str, tp: TopicPartition) -> float | None:
        commits = self.commits.get(group)
        at = commits.get(tp) if commits else None
        return at if at is not None else self.removed_commits.get((group, tp))

    def group_empty_since(self, group: str) -> float | None:
        at = self.empty_since.get(group)
        return at if at is not None else self.removed_empty_since.get(group)

    def apply(self, record: Record, lead_s: float = 0.0) -> None:
        """`lead_s`: how far the caller's clock runs ahead of the brokers' (lagwatch.clock, after a host clock
        step back): the records' times are moved by it, to compare with `now` (an Empty time off by the lead paged
        a healthy group's rolling restart as stopped)."""
        self.records += 1
        if isinstance(record, OffsetCommit):
            key = (record.topic, record.partition)
            tp = self._interned.get(key)
            if tp is None:  # one TopicPartition per partition, shared by every group: memory at 1M entries
                tp = self._interned[key] = TopicPartition(*key)
            self.commits.setdefault(record.group, {})[tp] = record.commit_timestamp_ms / 1000 + lead_s
        elif isinstance(record, OffsetTombstone):
            commits = self.commits.get(record.group)
            tp = TopicPartition(record.topic, record.partition)
            if commits is not None and tp in commits:
                # Kept until the next poll has seen the offset vanish: it tells an expiry from a deletion.
                self.removed_commits[(record.group, tp)] = commits.pop(tp)
                if not commits:
                    del self.commits[record.group]
        elif isinstance(record, GroupMetadata):
            if record.state_is_empty and record.current_state_timestamp_ms is not None:
                self.empty_since[record.group] = record.current_state_timestamp_ms / 1000 + lead_s
            else:
                self.empty_since.pop(record.group, None)
        elif isinstance(record, GroupTombstone):
            if record.group in self.empty_since:
                self.removed_empty_since[record.group] = self.empty_since.pop(record.group)
            for tp, at in self.commits.pop(record.group, {}).items():
                self.removed_commits[(record.group, tp)] = at
        elif isinstance(record, Undecodable):
            self.undecodable += 1


def compact_records(records: list[Record]) -> list[Record]:
    """The records whose effect on ExactClocks survives the batch, in order: a commit or group metadata that a later
    one of the same key overwrites, with no tombstone of that key or group in between to read it, is left out; so
    are the kinds ExactClocks ignores but counts. Applying the result to any ExactClocks leaves the same commits,
    empty_since and removed_* as applying `records`. What the lake records between two polls: a consumer commits
    every few seconds, and the reader catches up on the whole topic at start."""
    kept: list[Record] = []
    later_commit: set[tuple[str, str, int]] = set()
    later_metadata: set[str] = set()
    for record in reversed(records):
        if isinstance(record, OffsetCommit):
            key = (record.group, record.topic, record.partition)
            if key in later_commit:
                continue
            later_commit.add(key)
        elif isinstance(record, GroupMetadata):
            if record.group in later_metadata:
                continue
            later_metadata.add(record.group)
        elif isinstance(record, OffsetTombstone):
            later_commit.discard((record.group, record.topic, record.partition))  # it reads the commit before it
        elif isinstance(record, GroupTombstone):
            later_commit = {k for k in later_commit if k[0] != record.group}  # it reads all of the group's
            later_metadata.discard(record.group)
        else:
            continue
        kept.append(record)
    kept.reverse()
    return kept


_UNASKED: Any = object()  # a partition whose log-end bounds were not asked yet at this poll


def _aligned(ring: PollRing | None, start: int, newest: int) -> array[int] | None:
    """The ring's values from poll `start` to the newest when it sampled a value at every one of them, else None
    (a gap, a missing value: the sentinels are below every offset)."""
    if ring is None or ring.first > start or ring.first + len(ring.values) - 1 != newest:
        return None
    values = ring.values[start - ring.first :]
    return values if min(values) > NO_VALUE else None


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

    def window(self, progress: PartitionProgress, tp: TopicPartition, since: float) -> list[Sample]:
        """`tp`'s samples from the last one at or before `since` to now (so the window is fully covered); all of
        them when none is that old. Walks back from the newest: a window is a few samples of up to 64."""
        times, t0 = self.poll_times, self.poll_times_first
        values, first = progress.committed.values, progress.committed.first
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
        ring, t0, times = progress.committed, self.poll_times_first, self.poll_times
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
        committed = _aligned(progress.committed, start, newest)
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
            ring = progress.committed
            first, values = ring.first, ring.values
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
        ring = progress.committed
        values, first = ring.values, ring.first
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
        for group in snapshot.groups:
            seen.add(group.group_id)
            if group.error is None:
                self._observe_group(group, now, poll)
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
        commit_time, ready = self.exact.commit_time, self.exact.ready
        clocks = []
        for tp in tps:
            progress = progresses.get(tp)
            polled = progress.last_commit_change if progress is not None else None
            exact = commit_time(group_id, tp)
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

    def _observe_group(self, group: GroupSnapshot, now: float, poll: int) -> None:
        first_look = group.group_id not in self.groups
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
        absent = [tp for tp in partitions if tp not in committed_now]
        dropped = [(tp, partitions[tp].last_committed) for tp in group.unsubscribed(absent)] if absent else []
        # A commit last seen before the previous poll ended a wait of more than a poll: only then is it looked at
        # (a consumer that commits all the time costs one comparison a partition).
        times = self.poll_times
        previous_poll_t = times[-2] if len(times) > 1 else math.inf
        for tp in {*committed_now, *assigned} if assigned else committed_now:
            committed = committed_now.get(tp)
            offset = committed.offset if committed is not None else None
            progress = partitions.get(tp)
            if progress is None:  # not setdefault: that would build a PartitionProgress on every poll
                progress = partitions[tp] = PartitionProgress()
            ring = progress.committed
            if offset is not None:
                previous = ring.last
                if previous <= NO_VALUE and offset == next((v for v in reversed(ring.values) if v > NO_VALUE), None):
                    # A poll without this partition's commit (a partition-level OffsetFetch error), and the same
                    # offset before and after it: nothing happened (that poll restarted a hung consumer's clock).
                    # A different one is taken as new (a topic deleted and made again: no rewind of the old one).
                    pass
                elif previous <= NO_VALUE:  # no sample yet, or nothing committed at the last one
                    progress.last_commit_change = Clock(now, observed=bool(ring.values) and not first_look)
                elif offset != previous:
                    last = progress.last_commit_change
                    if last is not None and last.since < previous_poll_t:
                        short_run = 0.0 if progress.short_since is None else last.since - progress.short_since
                        if last.observed:
                            self._commit_wait(group.group_id, progress, tp, poll, previous, now, last.since, short_run)
                        progress.short_since = None
                    elif progress.short_since is None:
                        progress.short_since = now
                    progress.last_commit_change = Clock(now, observed=True)
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
        if gone_offsets:
            track.vanished = Vanished(
                now, gone_offsets, group_gone=False, clocks=self._expiry_clocks(group.group_id, gone_offsets)
            )
            for tp in gone_offsets:  # none is assigned (`dropped` leaves those out)
                del track.partitions[tp]

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
        window = self.stall_window_of(group_id, tp) if self.stall_window_of is not None else DEFAULT_STALL_WINDOW_S
        if window is None:
            return
        if now - since <= 2 * window and short_run <= 2 * window:
            wait = now - since
            # Kept a day only if it did not page: a batch consumer's hang that paged, kept, made its next hangs
            # that day page 17 minutes late (the latest waits let go of it after five more).
            cadence = trusted_cadence(progress.cadence_at(now), window)
            paged = wait > stall_threshold(window, cadence, self.groups[group_id].first_seen, now)
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
        ring, ends = progress.committed, self.log_ends.get(tp)
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
        arrays = _ArrayWriter()
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
            "groups": {g: _track_to_json(t, arrays.columns) for g, t in self.groups.items()},
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
        arrays = _ArrayReader(data["arrays"], data["byteorder"])
        history.poll_times_first = int(data["poll_times_first"])
        history.poll_times = array("d", (float(t) for t in data["poll_times"]))
        for topic, partition, n_times, n_ends in data["timelines"]:
            history.timelines[TopicPartition(topic, partition)] = LogEndTimeline(
                times=arrays.take("d", n_times), ends=arrays.take("q", n_ends)
            )
        for topic, partition, first, n in data["log_ends"]:
            history.log_ends[TopicPartition(topic, partition)] = PollRing(int(first), arrays.take("q", n))
        columns = _PartitionColumns.read(arrays, int(data["group_partitions"]))
        for group_id, raw in data["groups"].items():
            history.groups[group_id] = _track_from_json(raw, columns)
        arrays.done()
        return history


BIG_ENDIAN_HOST = array("H", [1]).tobytes()[0] == 0


def _little_endian(values: array[Any]) -> array[Any]:
    if not BIG_ENDIAN_HOST:
        return values
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped


@dataclass(frozen=True)
class HistoryCapture:
    document: dict[str, Any]
    arrays: bytes  # zlib-compressed

    def to_json(self) -> dict[str, Any]:
        return {**self.document, "arrays": base64.b64encode(self.arrays).decode("ascii")}


@dataclass
class _PartitionColumns:
    """Every group-partition's scalars, one array per field across the cluster (a JSON list per group-partition
    was most of a save at 100k of them); a group names only its topics, with how many partitions each."""

    partition: array[int] = field(default_factory=lambda: array("q"))
    ring_first: array[int] = field(default_factory=lambda: array("q"))
    ring_length: array[int] = field(default_factory=lambda: array("q"))
    commit_since: array[float] = field(default_factory=lambda: array("d"))
    commit_observed: array[int] = field(default_factory=lambda: array("b"))  # -1: no clock
    rings: list[array[int]] = field(default_factory=list)
    read_at: int = 0

    def add(self, tp: TopicPartition, p: PartitionProgress) -> None:
        self.partition.append(tp.partition)
        self.ring_first.append(p.committed.first)
        self.ring_length.append(len(p.committed.values))
        clock = p.last_commit_change
        self.commit_since.append(clock.since if clock else 0.0)
        self.commit_observed.append(-1 if clock is None else int(clock.observed))
        self.rings.append(p.committed.values)

    def fields(self) -> list[array[Any]]:
        return [self.partition, self.ring_first, self.ring_length, self.commit_since, self.commit_observed]

    @classmethod
    def read(cls, arrays: _ArrayReader, n: int) -> _PartitionColumns:
        columns = cls(
            partition=arrays.take("q", n),
            ring_first=arrays.take("q", n),
            ring_length=arrays.take("q", n),
            commit_since=arrays.take("d", n),
            commit_observed=arrays.take("b", n),
        )
        columns.rings = [arrays.take("q", length) for length in columns.ring_length]
        return columns

    def take(self, topic: str) -> tuple[TopicPartition, PartitionProgress]:
        i = self.read_at
        self.read_at += 1
        observed = self.commit_observed[i]
        clock = None if observed < 0 else Clock(self.commit_since[i], bool(observed))
        ring = PollRing(self.ring_first[i], self.rings[i])
        return TopicPartition(topic, self.partition[i]), PartitionProgress(ring, clock)


class _ArrayWriter:
    def __init__(self) -> None:
        self.parts: list[array[Any]] = []
        self.columns = _PartitionColumns()  # written after the arrays named one by one

    def add(self, values: array[Any]) -> int:
        self.parts.append(values)
        return len(values)

    def compressed(self, chunk_bytes: int = 1 << 20) -> bytes:
        """Every array named, in order, as one zlib stream. Level 1: offsets of one partition share their high
        bytes, and level 1 gets most of that, fast. The many small arrays (a ring per group-partition) are
        gathered into chunks: a compress call each would cost more than the copy."""
        compressor = zlib.compressobj(1)
        out, chunk = [], bytearray()
        for values in (*self.parts, *self.columns.fields(), *self.columns.rings):
            chunk += _little_endian(values)
            if len(chunk) >= chunk_bytes:
                out.append(compressor.compress(chunk))
                chunk.clear()
        out.append(compressor.compress(chunk))
        out.append(compressor.flush())
        return b"".join(out)


class _ArrayReader:
    def __init__(self, text: str, byteorder: str) -> None:
        try:
            self.raw = memoryview(zlib.decompress(base64.b64decode(text, validate=True)))
        except zlib.error as e:
            raise ValueError(f"history arrays damaged: {e}") from e
        if byteorder != "little":
            raise ValueError(f"history arrays in byte order {byteorder!r}")
        self.swap = BIG_ENDIAN_HOST
        self.pos = 0

    def take(self, typecode: str, n: int) -> array[Any]:
        values = array(typecode)
        size = int(n) * values.itemsize
        if n < 0 or self.pos + size > len(self.raw):
            raise ValueError("history arrays shorter than the document says")
        values.frombytes(self.raw[self.pos : self.pos + size])
        self.pos += size
        if self.swap:
            values.byteswap()
        return values

    def done(self) -> None:
        if self.pos != len(self.raw):
            raise ValueError("history arrays longer than the document says")


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
        track = _track_from_json(raw, None)
        for topic, partition, clock, samples in raw.get("partitions", []):
            tp = TopicPartition(topic, partition)
            progress = track.partitions[tp] = PartitionProgress(last_commit_change=_clock(clock))
            for t, committed, log_end in samples:
                poll = poll_of.get(float(t))
                if poll is not None:
                    progress.committed.put(poll, committed, MAX_SAMPLES)
                    ends.setdefault(tp, {})[poll] = log_end
        history.groups[group_id] = track
    for tp, by_poll in ends.items():
        ring = history.log_ends[tp] = PollRing()
        for poll in sorted(by_poll):
            ring.put(poll, by_poll[poll], MAX_SAMPLES)


def _clock_json(clock: Clock | None) -> list[Any] | None:
    return [clock.since, clock.observed] if clock else None


def _clock(raw: list[Any] | None) -> Clock | None:
    return Clock(float(raw[0]), bool(raw[1])) if raw else None


def _track_to_json(t: GroupTrack, columns: _PartitionColumns) -> dict[str, Any]:
    topics: list[list[Any]] = []  # [topic, count] per run of one topic, in the order of t.partitions
    for tp, p in t.partitions.items():
        columns.add(tp, p)
        if topics and topics[-1][0] == tp.topic:
            topics[-1][1] += 1
        else:
            topics.append([tp.topic, 1])
    return {
        "kind": t.kind,
        "state": t.state,
        "members": t.members,
        "first_seen": t.first_seen,
        "evidence_since": t.evidence_since,
        "unreadable": t.unreadable,
        "empty_since": _clock_json(t.empty_since),
        "gone_since": t.gone_since,
        "last_empty_at": t.last_empty_at,  # optional: saves before it have none
        "partitions": topics,
        # Only partitions that learnt a cadence (sinks, batch consumers): most have none.
        "commit_waits": [
            [tp.topic, tp.partition, list(p.waits), p.waits_at, p.longest_wait, p.longest_wait_at, p.short_since]
            for tp, p in t.partitions.items()
            if p.waits
        ],
        "rewinds": [[tp.topic, tp.partition, *r] for tp, r in t.rewinds.items()],
        "vanished": None
        if t.vanished is None
        else {
            "at": t.vanished.at,
            "group_gone": t.vanished.group_gone,
            "offsets": [[tp.topic, tp.partition, o] for tp, o in t.vanished.offsets.items()],
            "clocks": [[tp.topic, tp.partition, _clock_json(c)] for tp, c in t.vanished.clocks.items()],
        },
    }


def _track_from_json(raw: dict[str, Any], columns: _PartitionColumns | None) -> GroupTrack:
    """`columns` None: a schema 1-2 track, whose partitions the caller reads."""
    track = GroupTrack(
        kind=raw["kind"],
        state=raw["state"],
        members=raw.get("members", 0),
        first_seen=raw["first_seen"],
        empty_since=_clock(raw.get("empty_since")),
        gone_since=raw.get("gone_since"),
        last_empty_at=raw.get("last_empty_at"),
        evidence_since=raw.get("evidence_since"),
        unreadable=bool(raw.get("unreadable", False)),
    )
    if columns is not None:
        for topic, count in raw["partitions"]:
            for _ in range(int(count)):
                tp, progress = columns.take(str(topic))
                track.partitions[tp] = progress
    for topic, partition, at, old, new in raw.get("rewinds", []):
        track.rewinds[TopicPartition(topic, partition)] = (at, old, new)
    for topic, partition, waits, *at in raw.get("commit_waits", []):  # optional: saves before it have none
        learnt = track.partitions.get(TopicPartition(topic, partition))
        if learnt is not None:
            learnt.waits = tuple(float(w) for w in waits)[-COMMIT_WAITS_KEPT:]
            learnt.waits_at = float(at[0]) if at and at[0] is not None else None
            if len(at) >= 3 and at[2] is not None:  # optional: saves before it have no longest wait
                learnt.longest_wait, learnt.longest_wait_at = float(at[1]), float(at[2])
            # Optional too. Not saved, a restart forgot that a former sink had committed at every poll for an hour,
            # and its old cadence held its next hang back another hour.
            if len(at) >= 4 and at[3] is not None:
                learnt.short_since = float(at[3])
    vanished = raw.get("vanished")
    if vanished:
        offsets = {TopicPartition(t, p): o for t, p, o in vanished["offsets"]}
        clocks = {TopicPartition(t, p): c for t, p, raw in vanished.get("clocks", []) if (c := _clock(raw))}
        track.vanished = Vanished(vanished["at"], offsets, vanished["group_gone"], clocks)
    return track
