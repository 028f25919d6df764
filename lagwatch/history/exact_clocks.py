"""Clocks read from `__consumer_offsets` (the coordinator's own records): exact commit times, and when a classic
group became Empty. Fed by the reader thread between polls (ClusterHistory.observe_records)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lagwatch.model import TopicPartition
from lagwatch.offsets_topic import (
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    Record,
    Undecodable,
)


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
