"""What lagwatch has seen of one cluster over time: log-end timelines, commit progress, and the clocks that
decide offset expiry (when a group became Empty, when each committed offset last changed).

Pure: every method takes `now` (or a snapshot carrying its time) and does no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from lagwatch.history.timeline import LogEndTimeline
from lagwatch.model import ClusterSnapshot, GroupSnapshot, TopicPartition

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


@dataclass
class PartitionProgress:
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    last_commit_change: Clock | None = None

    @property
    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def window(self, since: float) -> list[Sample]:
        """Samples from the last one at or before `since` to now (so the window is fully covered)."""
        items = list(self.samples)
        start = 0
        for i, s in enumerate(items):
            if s.t <= since:
                start = i
        return items[start:]


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


@dataclass
class ClusterHistory:
    cluster: str
    timelines: dict[TopicPartition, LogEndTimeline] = field(default_factory=dict)
    groups: dict[str, GroupTrack] = field(default_factory=dict)
    last_ok_poll: float | None = None
    polls: int = 0

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Folds one poll in. A failed poll changes nothing: an outage must not look like vanished offsets."""
        if not snapshot.ok:
            return
        now = snapshot.taken_at
        self.polls += 1
        for tp, offsets in snapshot.partitions.items():
            if offsets.log_end is not None:
                self.timelines.setdefault(tp, LogEndTimeline()).add(now, offsets.log_end)
        seen = set()
        for group in snapshot.groups:
            seen.add(group.group_id)
            if group.error is None:
                self._observe_group(group, snapshot, now)
        for group_id, track in self.groups.items():
            if group_id not in seen and track.gone_since is None:
                track.gone_since = now
                last = {
                    tp: p.last.committed
                    for tp, p in track.partitions.items()
                    if p.last and p.last.committed is not None
                }
                if last:
                    track.vanished = Vanished(now, last, group_gone=True)
        self._evict(snapshot, now)
        self.last_ok_poll = now

    def _observe_group(self, group: GroupSnapshot, snapshot: ClusterSnapshot, now: float) -> None:
        first_look = group.group_id not in self.groups
        track = self.groups.get(group.group_id)
        if track is None or track.gone_since is not None:
            track = GroupTrack(kind=group.kind.value, state=group.state, members=len(group.members), first_seen=now)
            self.groups[group.group_id] = track
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
            progress = track.partitions.setdefault(tp, PartitionProgress())
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
            track.vanished = Vanished(now, gone_offsets, group_gone=False)
            for tp in gone_offsets:
                if tp not in assigned:
                    del track.partitions[tp]

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
            "cluster": self.cluster,
            "last_ok_poll": self.last_ok_poll,
            "polls": self.polls,
            "timelines": [[tp.topic, tp.partition, tl.to_json()] for tp, tl in self.timelines.items()],
            "groups": {g: _track_to_json(t) for g, t in self.groups.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterHistory:
        history = cls(cluster=data["cluster"], last_ok_poll=data.get("last_ok_poll"), polls=data.get("polls", 0))
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
        track.vanished = Vanished(vanished["at"], offsets, vanished["group_gone"])
    return track
