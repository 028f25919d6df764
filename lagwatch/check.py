"""`lagwatch check`: one poll of each cluster, printed like `kafka-consumer-groups --describe`, or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lagwatch.escape import visible
from lagwatch.lag import GroupLag, group_lag
from lagwatch.model import ClusterSnapshot

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


def lags_of(snapshot: ClusterSnapshot, use_last_stable: bool = False) -> list[GroupLag]:
    return [group_lag(g, snapshot.partitions, use_last_stable) for g in snapshot.groups]


def json_rows(snapshot: ClusterSnapshot, groups: Iterable[GroupLag]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
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
    for g in groups:
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
    widths = [max(len(row[i]) for row in lines) for i in range(len(_COLUMNS))]
    out = [f"cluster {snapshot.cluster}: {len(groups)} groups, polled in {snapshot.duration_s * 1000:.0f} ms"]
    for kind, count in sorted(snapshot.unwatched_groups.items()):  # never left out without a word
        out.append(f"and {count} {kind} group(s) this lagwatch does not watch yet (their lag is not shown)")
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines]
    out.append("")
    for g in groups:
        topics = ", ".join(f"{t.topic}={t.sum_lag}" for t in g.topics) or "no partitions"
        out.append(
            f"{visible(g.group.group_id)}: {g.group.kind.value}, {g.group.state}, {len(g.group.members)} members, "
            f"total lag {g.sum_lag}, max {g.max_lag} ({topics})"
        )
    return "\n".join(out)
