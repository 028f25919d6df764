"""What lagwatch has seen of one cluster over time: log-end timelines, commit progress, and the clocks that
decide offset expiry (when a group became Empty, when each committed offset last changed).

Two sources feed the clocks: polls (what changed between two polls, so a clock is only as exact as the poll
interval) and, where lagwatch may read `__consumer_offsets`, the coordinator's own records (`observe_records`: the
exact commit timestamp of every commit, also of the same offset committed again, and when a group became Empty).

Evidence: a window-based rule may only judge a window that lagwatch watched without a blind spell (a failed poll,
a gap longer than `max_gap_s` between polls, e.g. a restart of lagwatch, or a group that could not be read).
`evidence_since` is where the current unbroken stretch of observation began.

Pure: every method takes `now` (or a snapshot carrying its time) and does no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lagwatch.history.timeline import LogEndTimeline
from lagwatch.model import ClusterSnapshot, GroupSnapshot, TopicPartition
from lagwatch.offsets_topic import (
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    Record,
    Undecodable,
)

HISTORY_SCHEMA_VERSION = 2
MAX_SAMPLES = 64  # commit samples kept per group-partition: windows of a few hours at 30 s polls
VANISHED_KEEP_S = 3600.0  # how long a vanished group or offset is remembered (to report it expired)


@dataclass(frozen=True, slots=True)
class Sample:
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


@dataclass
class PartitionProgress:
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    last_commit_change: Clock | None = None

    @property
    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def window(self, since: float) -> list[Sample]:
        """Samples from the last one at or before `since` to now (so the window is fully covered); all of them
        when none is that old. Walks back from the newest: a window is a few samples of up to 64."""
        out = []
        for s in reversed(self.samples):
            out.append(s)
            if s.t <= since:
                break
        out.reverse()
        return out


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

    def apply(self, record: Record) -> None:
        self.records += 1
        if isinstance(record, OffsetCommit):
            key = (record.topic, record.partition)
            tp = self._interned.get(key)
            if tp is None:  # one TopicPartition per partition, shared by every group: memory at 1M entries
                tp = self._interned[key] = TopicPartition(*key)
            self.commits.setdefault(record.group, {})[tp] = record.commit_timestamp_ms / 1000
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
                self.empty_since[record.group] = record.current_state_timestamp_ms / 1000
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


@dataclass
class ClusterHistory:
    cluster: str
    timelines: dict[TopicPartition, LogEndTimeline] = field(default_factory=dict)
    groups: dict[str, GroupTrack] = field(default_factory=dict)
    last_ok_poll: float | None = None
    polls: int = 0
    # A longer gap between two good polls is a blind spell (lagwatch was down, or polls were skipped).
    max_gap_s: float = float("inf")
    evidence_since: float | None = None
    blind: bool = False  # a poll failed since the last good one
    exact: ExactClocks = field(default_factory=ExactClocks)

    def observe_records(self, records: Iterable[Record], caught_up: bool) -> None:
        """Folds in records read from `__consumer_offsets`, in the topic's order."""
        for record in records:
            self.exact.apply(record)
        self.exact.ready = self.exact.ready or caught_up

    def observe(self, snapshot: ClusterSnapshot) -> bool:
        """Folds one poll in. A failed poll changes nothing but the evidence: an outage must not look like vanished
        offsets. Returns True when this poll ends a blind spell (evidence starts again from it)."""
        if not snapshot.ok:
            self.blind = True
            return False
        now = snapshot.taken_at
        self.polls += 1
        resumed = self.last_ok_poll is not None and (self.blind or now - self.last_ok_poll > self.max_gap_s)
        if resumed or self.evidence_since is None:
            self.evidence_since = now
        self.blind = False
        for tp, offsets in snapshot.partitions.items():
            if offsets.log_end is not None:
                timeline = self.timelines.get(tp)
                if timeline is None:
                    timeline = self.timelines[tp] = LogEndTimeline()
                timeline.add(now, offsets.log_end)
        seen = set()
        for group in snapshot.groups:
            seen.add(group.group_id)
            if group.error is None:
                self._observe_group(group, snapshot, now)
            elif group.group_id in self.groups:
                self.groups[group.group_id].unreadable = True
        for group_id, track in self.groups.items():
            if group_id not in seen and track.gone_since is None:
                track.gone_since = now
                last = {
                    tp: p.last.committed
                    for tp, p in track.partitions.items()
                    if p.last and p.last.committed is not None
                }
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
        track = self.groups.get(group_id)
        polled = track.partitions[tp].last_commit_change if track and tp in track.partitions else None
        exact = self.exact.commit_time(group_id, tp)
        if exact is None:
            return polled
        if polled is not None and polled.observed and polled.since > exact:
            return polled  # committed again after the last record read: the poll saw it first
        return Clock(exact, observed=True)

    def empty_clock(self, group_id: str) -> Clock | None:
        """When this (classic) group became Empty: from its group metadata record where read, else as polled."""
        exact = self.exact.group_empty_since(group_id)
        if exact is not None:
            return Clock(exact, observed=True)
        track = self.groups.get(group_id)
        return track.empty_since if track else None

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

    def _observe_group(self, group: GroupSnapshot, snapshot: ClusterSnapshot, now: float) -> None:
        first_look = group.group_id not in self.groups
        track = self.groups.get(group.group_id)
        if track is None or track.gone_since is not None:
            track = GroupTrack(kind=group.kind.value, state=group.state, members=len(group.members), first_seen=now)
            self.groups[group.group_id] = track
        if track.evidence_since is None or track.unreadable:
            track.evidence_since = now
        track.unreadable = False
        track.kind, track.members = group.kind.value, len(group.members)
        if group.state == "Empty":
            if track.empty_since is None:
                # Seen becoming Empty only if lagwatch saw it in another state before.
                track.empty_since = Clock(now, observed=not first_look and track.state != "Empty")
        else:
            track.empty_since = None
        track.state = group.state

        assigned = {tp for m in group.members for tp in m.assignment}
        before = {tp for tp, p in track.partitions.items() if p.last and p.last.committed is not None}
        for tp in {*group.committed, *assigned}:
            committed = group.committed.get(tp)
            offset = committed.offset if committed else None
            log_end = snapshot.partitions[tp].log_end if tp in snapshot.partitions else None
            progress = track.partitions.get(tp)
            if progress is None:  # not setdefault: that would build a PartitionProgress on every poll
                progress = track.partitions[tp] = PartitionProgress()
            previous = progress.last
            if offset is not None:
                if previous is None or previous.committed is None:
                    progress.last_commit_change = Clock(now, observed=previous is not None and not first_look)
                elif offset != previous.committed:
                    progress.last_commit_change = Clock(now, observed=True)
                    if offset < previous.committed:
                        track.rewinds[tp] = (now, previous.committed, offset)
            progress.samples.append(Sample(now, offset, log_end))
        gone = {tp: track.partitions[tp].last.committed for tp in before - set(group.committed)}  # type: ignore[union-attr]
        gone_offsets = {tp: o for tp, o in gone.items() if o is not None}
        if gone_offsets:
            track.vanished = Vanished(
                now, gone_offsets, group_gone=False, clocks=self._expiry_clocks(group.group_id, gone_offsets)
            )
            for tp in gone_offsets:
                if tp not in assigned:
                    del track.partitions[tp]

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
        needed = {tp for t in self.groups.values() if t.gone_since is None for tp in t.partitions}
        for tp in [tp for tp in self.timelines if tp not in needed and tp not in snapshot.partitions]:
            del self.timelines[tp]

    # -- persistence (plain JSON-able data) --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": HISTORY_SCHEMA_VERSION,
            "cluster": self.cluster,
            "last_ok_poll": self.last_ok_poll,
            "polls": self.polls,
            "evidence_since": self.evidence_since,
            "blind": self.blind,
            "timelines": [[tp.topic, tp.partition, tl.to_json()] for tp, tl in self.timelines.items()],
            "groups": {g: _track_to_json(t) for g, t in self.groups.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterHistory:
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
        for topic, partition, points in data.get("timelines", []):
            history.timelines[TopicPartition(topic, partition)] = LogEndTimeline.from_json(points)
        for group_id, raw in data.get("groups", {}).items():
            history.groups[group_id] = _track_from_json(raw)
        return history


def _clock_json(clock: Clock | None) -> list[Any] | None:
    return [clock.since, clock.observed] if clock else None


def _clock(raw: list[Any] | None) -> Clock | None:
    return Clock(float(raw[0]), bool(raw[1])) if raw else None


def _track_to_json(t: GroupTrack) -> dict[str, Any]:
    return {
        "kind": t.kind,
        "state": t.state,
        "members": t.members,
        "first_seen": t.first_seen,
        "evidence_since": t.evidence_since,
        "unreadable": t.unreadable,
        "empty_since": _clock_json(t.empty_since),
        "gone_since": t.gone_since,
        "partitions": [
            [
                tp.topic,
                tp.partition,
                _clock_json(p.last_commit_change),
                [[s.t, s.committed, s.log_end] for s in p.samples],
            ]
            for tp, p in t.partitions.items()
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


def _track_from_json(raw: dict[str, Any]) -> GroupTrack:
    track = GroupTrack(
        kind=raw["kind"],
        state=raw["state"],
        members=raw.get("members", 0),
        first_seen=raw["first_seen"],
        empty_since=_clock(raw.get("empty_since")),
        gone_since=raw.get("gone_since"),
        evidence_since=raw.get("evidence_since"),
        unreadable=bool(raw.get("unreadable", False)),
    )
    for topic, partition, clock, samples in raw.get("partitions", []):
        progress = PartitionProgress(last_commit_change=_clock(clock))
        progress.samples.extend(Sample(float(t), c, e) for t, c, e in samples)
        track.partitions[TopicPartition(topic, partition)] = progress
    for topic, partition, at, old, new in raw.get("rewinds", []):
        track.rewinds[TopicPartition(topic, partition)] = (at, old, new)
    vanished = raw.get("vanished")
    if vanished:
        offsets = {TopicPartition(t, p): o for t, p, o in vanished["offsets"]}
        clocks = {TopicPartition(t, p): c for t, p, raw in vanished.get("clocks", []) if (c := _clock(raw))}
        track.vanished = Vanished(vanished["at"], offsets, vanished["group_gone"], clocks)
    return track
