"""`lagwatch check`: one poll of each cluster, printed like `kafka-consumer-groups --describe` (and share groups
like `kafka-share-groups --describe --offsets`), or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lagwatch.escape import visible
from lagwatch.lag import GroupLag, group_lag
from lagwatch.lag.share import ESTIMATED, share_partitions
from lagwatch.model import ClusterSnapshot, GroupKind

_COLUMNS = (
    "GROUP",
    "STATE",
    "TOPIC",
    "PARTITION",
    "COMMITTED",
    "LOG-END",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)


_SHARE_COLUMNS = ("GROUP", "STATE", "TOPIC", "PARTITION", "START-OFFSET", "LOG-END", "LAG", "MEMBERS")


def share_rows(snapshot: ClusterSnapshot, g: GroupLag) -> list[dict[str, Any]]:
    """A share group's rows, as `kafka-share-groups --describe --offsets` lists them (lag_source: broker, or
    estimated where the broker reports none)."""
    group = g.group
    return [
        {
            "cluster": snapshot.cluster,
            "group": group.group_id,
            "group_state": group.state,
            "group_kind": group.kind.value,
            "topic": p.topic,
            "partition": p.partition,
            "start_offset": p.start_offset,
            "log_end_offset": p.log_end,
            "log_start_offset": p.log_start,
            "lag": p.lag,
            "lag_source": p.lag_source.value if p.lag_source else None,
            "members": p.members,
        }
        for p in share_partitions(group, snapshot.partitions)
    ]


def lags_of(snapshot: ClusterSnapshot, use_last_stable: bool = False) -> list[GroupLag]:
    return [group_lag(g, snapshot.partitions, use_last_stable) for g in snapshot.groups]


def json_rows(snapshot: ClusterSnapshot, groups: Iterable[GroupLag]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.group.kind is GroupKind.SHARE:
            rows += share_rows(snapshot, g)
            continue
        for p in g.partitions:
            rows.append(
                {
                    "cluster": snapshot.cluster,
                    "group": g.group.group_id,
                    "group_state": g.group.state,
                    "group_kind": g.group.kind.value,
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed_offset": p.committed,
                    "log_end_offset": p.log_end,
                    "log_start_offset": p.log_start,
                    "lag": p.lag,
                    "lag_state": p.state.value,
                    "member_id": p.member_id,
                    "client_id": p.client_id,
                    "host": p.client_host,
                }
            )
    return rows


def render_json(results: list[tuple[ClusterSnapshot, list[GroupLag]]]) -> str:
    rows = [row for snapshot, groups in results for row in json_rows(snapshot, groups)]
    return json.dumps(rows, indent=2)


def render_table(snapshot: ClusterSnapshot, groups: list[GroupLag]) -> str:
    def cell(value: object) -> str:  # client ids and hosts, like group ids, are any client's: shown escaped
        return "-" if value is None else visible(str(value))

    lines: list[list[str]] = [list(_COLUMNS)]
    queues: list[list[str]] = [list(_SHARE_COLUMNS)]
    for g in groups:
        if g.group.kind is GroupKind.SHARE:
            for row in share_rows(snapshot, g):
                lag = cell(row["lag"]) + (" (estimated)" if row["lag_source"] == "estimated" else "")
                queues.append(
                    [
                        visible(g.group.group_id),
                        g.group.state,
                        row["topic"],
                        str(row["partition"]),
                        cell(row["start_offset"]),
                        cell(row["log_end_offset"]),
                        lag,
                        str(row["members"]),
                    ]
                )
            continue
        for p in g.partitions:
            lag = cell(p.lag) + (" (below log start)" if p.state.value == "below_log_start" else "")
            lines.append(
                [
                    visible(g.group.group_id),
                    g.group.state,
                    p.topic,
                    str(p.partition),
                    cell(p.committed),
                    cell(p.log_end),
                    lag,
                    cell(p.member_id),
                    cell(p.client_host),
                    cell(p.client_id),
                ]
            )
    out = [f"cluster {snapshot.cluster}: {len(groups)} groups, polled in {snapshot.duration_s * 1000:.0f} ms"]
    for kind, count in sorted(snapshot.unwatched_groups.items()):  # never left out without a word
        out.append(f"and {count} {kind} group(s) lagwatch cannot watch on this cluster (their lag is not shown)")
    for why in snapshot.blind_spots.values():
        out.append(f"note: {why}")
    out += _aligned(lines)
    if len(queues) > 1:
        out += ["", "share groups:", *_aligned(queues)]
        if any(row[6].endswith("(estimated)") for row in queues):
            out.append(f"(estimated) {ESTIMATED}")
    out.append("")
    for g in groups:
        topics = ", ".join(f"{t.topic}={t.sum_lag}" for t in g.topics) or "no partitions"
        total = f"total lag {g.sum_lag}, max {g.max_lag} ({topics})"
        if g.group.kind is GroupKind.SHARE and g.group.share_offsets and not g.group.committed:
            total = "lag not reported by the broker"
        out.append(
            f"{visible(g.group.group_id)}: {g.group.kind.value}, {g.group.state}, {len(g.group.members)} members, "
            + total
        )
    return "\n".join(out)


def _aligned(lines: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines]
