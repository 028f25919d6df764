"""ClusterSnapshots to lake rows and back, losslessly. Pure: the standard library and the model only (no pyarrow),
so the Spark backtest's executors import it next to the core.

One poll of one cluster becomes, in this order (`ordinal` keeps it):
  - one `poll` row: duration, error, the brokers' retention settings, requests, missing topics, record times;
  - one `record` row per `__consumer_offsets` record the daemon folded into the history since the previous poll
    (exact clocks: commits, offset and group tombstones, group metadata), in the topic's order;
  - per group, one `group` row (state, protocol, kind, coordinator, members as JSON, error), then one `partition`
    row per group-partition (committed offset, the partition's offsets, lag, lag state, lag in seconds);
  - one `offsets` row per partition of the snapshot that no group-partition row carries.
Analysts read the `partition` rows (`row_kind = 'partition'`); a replay reads them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lagwatch.model import (
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    Member,
    PartitionOffsets,
    TopicPartition,
)
from lagwatch.offsets_topic import (
    GroupMember,
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    Record,
)

# 2: group rows carry `expires_at`; `record` rows and the poll row's `records_caught_up` carry the exact clocks' input.
# 3: partition and offsets rows carry `consumable_end` (where the transaction markers that end the log begin).
# 4: a group row's member entry in `members_json` carries a sixth element when the member subscribes by regex
#    (KIP-848): the pattern.
# Readers take every version (a column missing from older files reads as null).
SCHEMA_VERSION = 4

# Column name -> type (names of pyarrow types, so that this module needs no pyarrow). `cluster` and `date` are
# the Hive partition keys: in the path, not in the files.
SNAPSHOT_COLUMNS: dict[str, str] = {
    "schema_version": "int16",
    "taken_at": "float64",  # seconds since the epoch, exactly as the daemon saw it (the replay's clock)
    "poll_time": "timestamp",  # the same, for people and SQL (UTC, microseconds)
    "ordinal": "int32",  # row order within the poll
    "row_kind": "string",  # poll | group | partition | offsets
    "group": "string",
    "group_kind": "string",
    "group_state": "string",
    "protocol_type": "string",
    "coordinator_id": "int32",
    "members": "int32",
    # group rows: [[member_id, client_id, host, [[topic, partition]...], [topics], regex (only if it has one)]]
    "members_json": "string",
    "group_error": "string",
    "topic": "string",
    "partition": "int32",
    "committed": "int64",
    "leader_epoch": "int32",
    "commit_metadata": "string",
    "offsets_known": "bool",  # false: the snapshot had no offsets for this partition
    "log_start": "int64",
    "log_end": "int64",
    "last_stable": "int64",
    "consumable_end": "int64",  # PartitionOffsets.consumable_end: only transaction markers from there to log_end
    "partition_error": "string",
    "lag": "int64",
    "lag_state": "string",
    "lag_seconds": "float64",
    "lag_seconds_estimated": "bool",
    "lag_seconds_exact": "bool",
    "member_id": "string",
    "duration_s": "float64",  # poll rows from here on
    "error": "string",
    "error_kind": "string",
    "brokers_json": "string",  # [[broker_id, offsets_retention_minutes, offsets_retention_check_interval_ms]]
    "requests_json": "string",
    "missing_topics_json": "string",
    "record_times_json": "string",  # [[topic, partition, offset, written_at]]
    "expires_at": "float64",  # group rows (version 2): the earliest time the group's offsets can expire
    "records_caught_up": "bool",  # poll rows (version 2): the __consumer_offsets reader had read up to the end
    "record_json": "string",  # record rows (version 2): one decoded __consumer_offsets record, losslessly
}

ALERT_COLUMNS: dict[str, str] = {
    "schema_version": "int16",
    "at": "float64",  # when the transition happened (the poll's time)
    "time": "timestamp",
    "transition": "string",  # firing | resolved
    "key": "string",
    "rule": "string",
    "severity": "string",
    "group": "string",
    "labels_json": "string",
    "summary": "string",
    "started_at": "float64",  # when the condition was first seen (pending)
    "fired_at": "float64",
    "resolved_at": "float64",
    "peak_lag": "int64",
    "details_json": "string",
    "config_hash": "string",
}

CONFIG_COLUMNS: dict[str, str] = {
    "schema_version": "int16",
    "recorded_at": "float64",
    "time": "timestamp",
    "config_hash": "string",
    "rules_json": "string",
    "alerts_json": "string",
    "max_gap_s": "float64",  # the history's blind-spell threshold, 2 x poll interval + request timeout
    "read_committed": "bool",
    "poll_interval_s": "float64",
    "lagwatch_version": "string",
}

# "timestamp" columns hold seconds since the epoch (floats) until the writer converts them.
Columns = dict[str, list[Any]]
LagFigures = Mapping[str, Mapping[TopicPartition, tuple[int | None, str, float | None, bool, bool]]]


def empty(columns: Mapping[str, str]) -> Columns:
    return {name: [] for name in columns}


def date_of(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def record_json(record: Record) -> str | None:
    """One `__consumer_offsets` record as compact JSON; None for the kinds the history ignores (other key types,
    undecodable records)."""
    if isinstance(record, OffsetCommit):
        r = record
        return _dumps(["commit", r.group, r.topic, r.partition, r.offset, r.leader_epoch, r.metadata,
                       r.commit_timestamp_ms, r.expire_timestamp_ms, r.value_version])  # fmt: skip
    if isinstance(record, OffsetTombstone):
        return _dumps(["offset_tombstone", record.group, record.topic, record.partition])
    if isinstance(record, GroupMetadata):
        g = record
        members = [[m.member_id, m.group_instance_id, m.client_id, m.client_host, list(m.subscribed_topics)]
                   for m in g.members]  # fmt: skip
        return _dumps(["group", g.group, g.protocol_type, g.generation, g.protocol, g.leader,
                       g.current_state_timestamp_ms, members, g.value_version])  # fmt: skip
    if isinstance(record, GroupTombstone):
        return _dumps(["group_tombstone", record.group])
    return None


def record_from_json(text: str) -> Record:
    x = json.loads(text)
    kind = x[0]
    if kind == "commit":
        return OffsetCommit(x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9])
    if kind == "offset_tombstone":
        return OffsetTombstone(x[1], x[2], x[3])
    if kind == "group":
        members = tuple(GroupMember(m[0], m[1], m[2], m[3], tuple(m[4])) for m in x[7])
        return GroupMetadata(x[1], x[2], x[3], x[4], x[5], x[6], members, x[8])
    if kind == "group_tombstone":
        return GroupTombstone(x[1])
    raise ValueError(f"unknown record kind {kind!r}")


def snapshot_rows(
    snapshot: ClusterSnapshot,
    figures: LagFigures,
    expiries: Mapping[str, float] | None = None,
    records: Sequence[Record] = (),
    records_caught_up: bool = False,
) -> Columns:
    """One poll as columns. `figures`: per group and partition (lag, lag state, seconds, estimated, exact), as the
    daemon's evaluation computed them; partitions without figures get lag and state from the offsets alone.
    `expiries`: per group, the earliest time its offsets can expire (the evaluation's). `records`: the
    `__consumer_offsets` records folded into the history since the previous poll, and whether the reader had
    caught up, so that a replay feeds the step the same."""
    from lagwatch.lag.offsets import partition_lag  # pure core

    names = list(SNAPSHOT_COLUMNS)
    t = snapshot.taken_at
    rows: list[tuple[Any, ...]] = []

    def row(kind: str, **values: Any) -> None:
        fixed = {
            "schema_version": SCHEMA_VERSION,
            "taken_at": t,
            "poll_time": t,
            "ordinal": len(rows),
            "row_kind": kind,
        }
        rows.append(tuple(fixed[n] if n in fixed else values.get(n) for n in names))

    row(
        "poll",
        duration_s=snapshot.duration_s,
        error=snapshot.error,
        error_kind=snapshot.error_kind,
        brokers_json=_dumps(
            [
                [b.broker_id, b.offsets_retention_minutes, b.offsets_retention_check_interval_ms]
                for b in snapshot.brokers
            ]
        ),
        requests_json=_dumps(dict(snapshot.requests)),
        missing_topics_json=_dumps(sorted(snapshot.missing_topics)),
        record_times_json=_dumps([[tp.topic, tp.partition, o, w] for (tp, o), w in snapshot.record_times.items()])
        if snapshot.record_times
        else None,
        records_caught_up=records_caught_up,
    )
    for record in records:
        text = record_json(record)
        if text is None:
            continue
        commit = record if isinstance(record, OffsetCommit) else None
        row(
            "record",
            group=getattr(record, "group", None),
            topic=getattr(record, "topic", None),
            partition=getattr(record, "partition", None),
            committed=commit.offset if commit else None,
            record_json=text,
        )
    covered: set[TopicPartition] = set()
    for g in snapshot.groups:
        kind = g.kind.value
        row(
            "group",
            group=g.group_id,
            group_kind=kind,
            group_state=g.state,
            members=len(g.members),
            protocol_type=g.protocol_type,
            coordinator_id=g.coordinator_id,
            members_json=_dumps(
                [
                    [
                        m.member_id,
                        m.client_id,
                        m.client_host,
                        [list(a) for a in m.assignment],
                        list(m.subscribed_topics),
                        *((m.subscribed_regex,) if m.subscribed_regex else ()),
                    ]
                    for m in g.members
                ]
            ),
            group_error=g.error,
            expires_at=(expiries or {}).get(g.group_id),
        )
        member_of = g.member_of()
        group_figures = figures.get(g.group_id, {})
        for tp in [*g.committed, *(tp for tp in member_of if tp not in g.committed)]:
            c = g.committed.get(tp)
            offsets = snapshot.partitions.get(tp)
            covered.add(tp)
            fig = group_figures.get(tp)
            if fig is None:
                lag, state = partition_lag(c.offset if c else None, offsets)
                fig = (lag, state.value, None, False, False)
            member = member_of.get(tp)
            # Most rows are these: one tuple in column order (the generic `row` costs 3x more at 100k a poll).
            rows.append(
                (
                    SCHEMA_VERSION, t, t, len(rows), "partition",
                    g.group_id, kind, g.state, None, None, len(g.members), None, None,
                    tp.topic, tp.partition,
                    c.offset if c else None, c.leader_epoch if c else None, c.metadata if c else None,
                    offsets is not None,
                    offsets.log_start if offsets else None, offsets.log_end if offsets else None,
                    offsets.last_stable if offsets else None, offsets.consumable_end if offsets else None,
                    offsets.error if offsets else None,
                    fig[0], fig[1], fig[2], fig[3], fig[4],
                    member.member_id if member else None,
                    None, None, None, None, None, None, None, None, None, None,
                )
            )  # fmt: skip
    for tp, offsets in snapshot.partitions.items():
        if tp not in covered:
            row(
                "offsets",
                topic=tp.topic,
                partition=tp.partition,
                offsets_known=True,
                log_start=offsets.log_start,
                log_end=offsets.log_end,
                last_stable=offsets.last_stable,
                consumable_end=offsets.consumable_end,
                partition_error=offsets.error,
            )
    return {name: list(column) for name, column in zip(names, zip(*rows, strict=True), strict=True)}


def _int(value: Any) -> int | None:
    """Nullable integers come back from pandas as floats (NaN for null) or pandas' NA."""
    if value is None or value != value:  # NaN
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ReplayPoll:
    """One recorded poll, as the daemon's step took it: the snapshot, and the `__consumer_offsets` records folded
    into the history just before it (with whether the reader had caught up)."""

    snapshot: ClusterSnapshot
    records: tuple[Record, ...]
    records_caught_up: bool


def polls_from_rows(cluster: str, rows: Iterable[Mapping[str, Any]]) -> list[ReplayPoll]:
    """The polls of one cluster, in time order, from its rows (any order; `taken_at` and `ordinal` sort them).
    A poll whose `poll` row is missing (a partial read) is skipped."""
    by_poll: dict[float, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_poll.setdefault(float(r["taken_at"]), []).append(r)
    out = []
    for t in sorted(by_poll):
        poll_rows = sorted(by_poll[t], key=lambda r: int(r["ordinal"]))
        if not poll_rows or poll_rows[0]["row_kind"] != "poll":
            continue
        records = tuple(record_from_json(r["record_json"]) for r in poll_rows if r["row_kind"] == "record")
        caught_up = poll_rows[0].get("records_caught_up")
        out.append(ReplayPoll(_snapshot(cluster, t, poll_rows), records, caught_up is True))
    return out


def snapshots_from_rows(cluster: str, rows: Iterable[Mapping[str, Any]]) -> list[ClusterSnapshot]:
    """The snapshots of one cluster, in time order (see polls_from_rows)."""
    return [p.snapshot for p in polls_from_rows(cluster, rows)]


def _snapshot(cluster: str, t: float, rows: Sequence[Mapping[str, Any]]) -> ClusterSnapshot:
    head = rows[0]
    groups: list[GroupSnapshot] = []
    partitions: dict[TopicPartition, PartitionOffsets] = {}
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            groups.append(GroupSnapshot(**current))

    for r in rows[1:]:
        kind = r["row_kind"]
        if kind == "group":
            close()
            current = {
                "group_id": r["group"],
                "state": r["group_state"],
                "protocol_type": r["protocol_type"] or "",
                "kind": GroupKind(r["group_kind"]),
                "coordinator_id": _int(r["coordinator_id"]),
                "members": tuple(
                    Member(
                        m[0],
                        m[1],
                        m[2],
                        tuple(TopicPartition(a[0], a[1]) for a in m[3]),
                        tuple(m[4]),
                        m[5] if len(m) > 5 else None,
                    )
                    for m in json.loads(r["members_json"] or "[]")
                ),
                "committed": {},
                "error": _str(r["group_error"]),
            }
            continue
        if kind == "record":
            continue  # the exact clocks' input, not part of the poll (polls_from_rows)
        tp = TopicPartition(r["topic"], int(r["partition"]))
        if kind == "partition" and current is not None:
            committed = _int(r["committed"])
            if committed is not None:
                current["committed"][tp] = CommittedOffset(
                    committed, _int(r["leader_epoch"]), _str(r["commit_metadata"]) or ""
                )
        if bool(r["offsets_known"]) and tp not in partitions:
            partitions[tp] = PartitionOffsets(
                _int(r["log_start"]),
                _int(r["log_end"]),
                _int(r["last_stable"]),
                _str(r["partition_error"]),
                _int(r.get("consumable_end")),  # null in files before version 3
            )
    close()
    record_times = {
        (TopicPartition(x[0], x[1]), int(x[2])): float(x[3])
        for x in json.loads(_str(head["record_times_json"]) or "[]")
    }
    return ClusterSnapshot(
        cluster=cluster,
        taken_at=t,
        duration_s=float(head["duration_s"]),
        groups=tuple(groups),
        partitions=partitions,
        brokers=tuple(BrokerSettings(b[0], b[1], b[2]) for b in json.loads(head["brokers_json"] or "[]")),
        requests=json.loads(head["requests_json"] or "{}"),
        record_times=record_times,
        missing_topics=frozenset(json.loads(head["missing_topics_json"] or "[]")),
        error=_str(head["error"]),
        error_kind=_str(head["error_kind"]),
    )
