"""JSON views of the daemon's state for the HTTP API. Plain dicts, built from the latest poll of each cluster."""

from __future__ import annotations

from typing import Any

from lagwatch.alerts import Alert, Silence
from lagwatch.lag.share import share_partitions
from lagwatch.model import GroupKind, GroupSnapshot
from lagwatch.rules import Evaluation
from lagwatch.runtime import ClusterRuntime


def cluster_view(rt: ClusterRuntime) -> dict[str, Any]:
    snap = rt.latest
    return {
        "name": rt.name,
        "up": bool(snap and snap.ok),
        "last_poll": snap.taken_at if snap else None,
        "last_success": rt.last_success,
        "poll_duration_s": snap.duration_s if snap else None,
        "groups": len(snap.groups) if snap and snap.ok else None,
        "error": None if snap is None or snap.ok else {"kind": snap.error_kind, "detail": snap.error},
        "polls": rt.polls,
        "failed_polls": rt.failed_polls,
        "skipped_polls": rt.skipped_polls + rt.missed_polls,
        "exact_clocks": rt.exact_clocks(),
        "unwatched_groups": dict(snap.unwatched_groups) if snap and snap.ok else {},
        "blind_spots": dict(snap.blind_spots) if snap and snap.ok else {},
    }


def alert_view(a: Alert, silence: Silence | None = None) -> dict[str, Any]:
    return {
        "rule": a.rule,
        "severity": a.severity,
        "state": a.state,
        "labels": a.labels,
        "summary": a.summary,
        "details": a.details,
        "started_at": a.started_at,
        "fired_at": a.fired_at,
        "resolved_at": a.resolved_at,
        "runbook_url": a.runbook_url,
        "silenced_by": silence.id if silence else None,
    }


def silence_view(s: Silence) -> dict[str, Any]:
    return {
        "id": s.id,
        "matchers": s.matchers,
        "starts_at": s.starts_at,
        "ends_at": s.ends_at,
        "comment": s.comment,
        "created_by": s.created_by,
    }


def group_summaries(rt: ClusterRuntime) -> list[dict[str, Any]] | None:
    """Every group of the latest successful poll, in one pass; None when there is none."""
    snap, evaluation = rt.published()
    if snap is None or not snap.ok:
        return None
    return [_summary(rt, group, evaluation) for group in snap.groups]


def group_detail(rt: ClusterRuntime, group_id: str, alerts: list[dict[str, Any]]) -> dict[str, Any] | None:
    snap, evaluation = rt.published()
    if snap is None or not snap.ok:
        return None
    group = next((g for g in snap.groups if g.group_id == group_id), None)
    if group is None:
        return None
    m = evaluation.measures.get(group_id) if evaluation else None
    partitions = []
    for pm in m.partitions if m else ():
        p = pm.partition
        partitions.append(
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed_offset": p.committed,
                "log_start_offset": p.log_start,
                "log_end_offset": p.log_end,
                "lag": p.lag,
                "lag_state": p.state.value,
                "lag_seconds": pm.lag_time.seconds,
                "lag_seconds_estimated": pm.lag_time.estimated,
                "lag_seconds_exact": pm.lag_time.exact,
                "member_id": p.member_id,
                "client_id": p.client_id,
                "host": p.client_host,
            }
        )
    shares = None
    if group.kind is GroupKind.SHARE:
        shares = [
            {**p._asdict(), "lag_source": p.lag_source.value if p.lag_source else None}
            for p in share_partitions(group, snap.partitions)
        ]
    return {
        **_summary(rt, group, evaluation),
        "partitions": partitions,
        "share_partitions": shares,
        "alerts": alerts,
    }


def _summary(rt: ClusterRuntime, group: GroupSnapshot, evaluation: Evaluation | None) -> dict[str, Any]:
    group_id = group.group_id
    m = evaluation.measures.get(group_id) if evaluation else None
    expires_at = evaluation.expiries.get(group_id) if evaluation else None
    return {
        "cluster": rt.name,
        "group": group_id,
        "state": group.state,
        "kind": group.kind.value,
        "members": len(group.members),
        "error": group.error,
        "lag": m.lag.sum_lag if m and m.lag.known else None,
        "max_lag": m.lag.max_lag if m and m.lag.known else None,
        "max_lag_seconds": m.max_lag_seconds if m else None,
        "lag_seconds_estimated": m.lag_seconds_estimated if m else None,
        "eta_s": m.eta_s if m else None,
        "falling_behind": m.falling_behind if m else None,
        "production_rate": m.production_rate if m else None,
        "consumption_rate": m.consumption_rate if m else None,
        "offsets_expire_at": expires_at,
    }
