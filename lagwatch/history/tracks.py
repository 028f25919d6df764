"""What the history keeps per group and group-partition: commit progress, its learnt commit cadence, the clocks
that decide expiry. Plain data; the history (store.py) changes it at each poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from mypy_extensions import mypyc_attr

from lagwatch.history.rings import NO_VALUE, PollRing
from lagwatch.model import TopicPartition

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
# Before a partition's commit cadence is known, in the first hour lagwatch watches its group, `stalled` waits
# twice its window: a sink that commits every 6 minutes is not paged under a 5-minute window while it is learnt.
# Not a group seen committing promptly from its start (GroupTrack.prompt): a consumer that commits once and hangs
# right after a deploy was paged at twice the window, 10 minutes with the defaults.
LEARNING_S = 3600.0


def stall_threshold(window: float, cadence: float | None, learning: bool) -> float:
    """How long records may wait for a partition's commit before `stalled` pages it: the rule's window, or twice
    the partition's own cadence where that is longer; twice the window while it is learnt (`learning`:
    GroupTrack.learning). Used by the rule, and by the history to learn only waits that did not page (a hang that
    paged, learnt, made the next ones go unpaged)."""
    if cadence is not None:
        return max(window, 2 * cadence)
    return 2 * window if learning else window


def trusted_cadence(cadence: float | None, window: float) -> float | None:
    """A cadence longer than twice the window was never learnt (saved by an earlier build): not trusted."""
    return None if cadence is not None and cadence > 2 * window else cadence


class Sample(NamedTuple):
    """One poll's view of a group-partition, built on demand for the window rules (a NamedTuple: built 2.7x faster
    than a frozen dataclass, and a window of a busy group is thousands of them)."""

    t: float
    committed: int | None
    log_end: int | None


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
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


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
@dataclass(slots=True)
class CommitWaits:
    """How long records waited for a partition's commit, the last few times it took longer than a poll (a sink
    that flushes every 6 minutes): seconds from the first poll that saw records waiting to the poll that saw the
    commit, within unbroken observation, no longer than twice the window and not after a long run of commits a
    poll apart (a wait that long, or a busy consumer's hang, was a stall that paged: learnt, it made the next
    ones page later). Empty for a consumer that commits at every poll or as soon as a record comes: `stalled`
    then waits its window; else twice the longest of them. Read and set through PartitionProgress."""

    waits: tuple[float, ...] = ()
    waits_at: float | None = None  # when the last of them was learnt
    longest_wait: float = 0.0  # the longest learnt within LONGEST_WAIT_KEPT_S (0: none)
    longest_wait_at: float | None = None  # when it was learnt


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
@dataclass(slots=True)
class PartitionProgress(PollRing):
    """A group-partition's committed offset at each poll that sampled it (times and log ends: ClusterHistory).

    It is its own ring of committed offsets (`committed` is itself): a PollRing object beside it was 48 bytes and
    one object more per group-partition (48 MB at 1M group-partitions)."""

    last_commit_change: Clock | None = None
    # When the current run of commits a poll after the one before began (None: the last commit took longer).
    short_since: float | None = None
    # The waits learnt (CommitWaits), None until the first is: most partitions never learn one. Four fields kept
    # beside them on every partition made it 96 bytes, not 80 (16 MB at 1M group-partitions).
    learnt: CommitWaits | None = None

    @property
    def waits(self) -> tuple[float, ...]:
        return () if self.learnt is None else self.learnt.waits

    @waits.setter
    def waits(self, waits: tuple[float, ...]) -> None:
        self._waits().waits = waits

    @property
    def waits_at(self) -> float | None:
        return None if self.learnt is None else self.learnt.waits_at

    @waits_at.setter
    def waits_at(self, at: float | None) -> None:
        self._waits().waits_at = at

    @property
    def longest_wait(self) -> float:
        return 0.0 if self.learnt is None else self.learnt.longest_wait

    @longest_wait.setter
    def longest_wait(self, wait: float) -> None:
        self._waits().longest_wait = wait

    @property
    def longest_wait_at(self) -> float | None:
        return None if self.learnt is None else self.learnt.longest_wait_at

    @longest_wait_at.setter
    def longest_wait_at(self, at: float | None) -> None:
        self._waits().longest_wait_at = at

    def _waits(self) -> CommitWaits:
        if self.learnt is None:
            self.learnt = CommitWaits()
        return self.learnt

    @property
    def committed(self) -> PollRing:
        """The ring of committed offsets: this object itself."""
        return self

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
        raw = self.last
        return None if raw <= NO_VALUE else raw


# Slotted: an instance dict was 184 of its 240 bytes (one per group: 18 MB at 1M group-partitions).
@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
@dataclass(slots=True)
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
    # Seen assigned a partition with no commit, records arriving, and committing there within half the stall
    # window: a consumer that commits promptly, no sink flushing on a cadence of its own (a sink's first flush
    # comes a flush interval after its start). Its first hour waits the window, not twice it.
    prompt: bool = False
    # Committed offsets the last poll's answer left out, group still there: when first missed (vanished if the next
    # misses them too). Not saved: a restart between the two is a blind spell, and the next poll judges again.
    missing: dict[TopicPartition, float] | None = None

    def learning(self, now: float) -> bool:
        """Whether `stalled` still learns this group's commit cadence (its first hour, unless seen prompt)."""
        return not self.prompt and now - self.first_seen < LEARNING_S
