"""The history as a saved document: per-poll values in one compressed binary field (JSON lists of numbers were 90%
of a save's time at 100k group-partitions), the rest as JSON."""

from __future__ import annotations

import base64
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any

from lagwatch.history.tracks import COMMIT_WAITS_KEPT, Clock, GroupTrack, PartitionProgress, Vanished
from lagwatch.model import TopicPartition

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
class PartitionColumns:
    """Every group-partition's scalars, one array per field across the cluster (a JSON list per group-partition
    was most of a save at 100k of them); a group names only its topics, with how many partitions each."""

    partition: array[int] = field(default_factory=lambda: array("q"))
    ring_first: array[int] = field(default_factory=lambda: array("q"))
    ring_length: array[int] = field(default_factory=lambda: array("q"))
    commit_since: array[float] = field(default_factory=lambda: array("d"))
    commit_observed: array[int] = field(default_factory=lambda: array("b"))  # -1: no clock
    rings: list[array[int]] = field(default_factory=list)
    read_at: int = 0
    clocks: dict[tuple[float, bool], Clock] = field(default_factory=dict)  # `take`'s, one per distinct value

    def add(self, tp: TopicPartition, p: PartitionProgress) -> None:
        self.partition.append(tp.partition)
        self.ring_first.append(p.first)
        self.ring_length.append(len(p.values))
        clock = p.last_commit_change
        self.commit_since.append(clock.since if clock else 0.0)
        self.commit_observed.append(-1 if clock is None else int(clock.observed))
        self.rings.append(p.values)

    def fields(self) -> list[array[Any]]:
        return [self.partition, self.ring_first, self.ring_length, self.commit_since, self.commit_observed]

    @classmethod
    def read(cls, arrays: ArrayReader, n: int) -> PartitionColumns:
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
        if observed < 0:
            clock = None
        else:  # one Clock per distinct value, as the polls share them (ClusterHistory.observe)
            key = (self.commit_since[i], bool(observed))
            clock = self.clocks.get(key)
            if clock is None:
                clock = self.clocks[key] = Clock(*key)
        return TopicPartition(topic, self.partition[i]), PartitionProgress(self.ring_first[i], self.rings[i], clock)


class ArrayWriter:
    def __init__(self) -> None:
        self.parts: list[array[Any]] = []
        self.columns = PartitionColumns()  # written after the arrays named one by one

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


class ArrayReader:
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


def clock_json(clock: Clock | None) -> list[Any] | None:
    return [clock.since, clock.observed] if clock else None


def clock_from_json(raw: list[Any] | None) -> Clock | None:
    return Clock(float(raw[0]), bool(raw[1])) if raw else None


def track_to_json(t: GroupTrack, columns: PartitionColumns) -> dict[str, Any]:
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
        "empty_since": clock_json(t.empty_since),
        "gone_since": t.gone_since,
        "last_empty_at": t.last_empty_at,  # optional: saves before it have none
        "prompt": t.prompt,  # optional: saves before it have none
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
            "clocks": [[tp.topic, tp.partition, clock_json(c)] for tp, c in t.vanished.clocks.items()],
        },
    }


def track_from_json(raw: dict[str, Any], columns: PartitionColumns | None) -> GroupTrack:
    """`columns` None: a schema 1-2 track, whose partitions the caller reads."""
    track = GroupTrack(
        kind=raw["kind"],
        state=raw["state"],
        members=raw.get("members", 0),
        first_seen=raw["first_seen"],
        empty_since=clock_from_json(raw.get("empty_since")),
        gone_since=raw.get("gone_since"),
        last_empty_at=raw.get("last_empty_at"),
        prompt=bool(raw.get("prompt", False)),
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
        clocks = {TopicPartition(t, p): c for t, p, raw in vanished.get("clocks", []) if (c := clock_from_json(raw))}
        track.vanished = Vanished(vanished["at"], offsets, vanished["group_gone"], clocks)
    return track
