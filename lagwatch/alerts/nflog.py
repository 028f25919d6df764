"""The notification log: what each receiver was told of each alert group, and when (Alertmanager's nflog).

It decides what a receiver is owed now: its first notification after `group_wait`, changes at most every
`group_interval`, an unchanged firing group again after `repeat_interval`, and a last one when all ended. Each
receiver remembers on its own, so none gets a "resolved" for an alert it never saw.

What a receiver was told is recorded when a notification is decided (it goes to the outbox in the same save). A
notification that is never delivered (refused for good, or too old) takes back what it recorded: `undo`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts.records import (
    ALERT_FIELDS,
    Alert,
    AlertRecord,
    AlertState,
    Notification,
    NotificationKind,
    Receiver,
)
from lagwatch.alerts.settings import AlertsConfig
from lagwatch.model import SEVERITY_OF, Severity, from_row, key_part, worst


@dataclass
class AlertGroup:
    key: str
    labels: dict[str, str]
    # Per receiver: alert key -> severity, as last announced to it, and when.
    notified: dict[str, dict[str, Severity]] = field(default_factory=dict)
    last_notified_at: dict[str, float] = field(default_factory=dict)
    storm: dict[str, str] = field(default_factory=dict)  # receiver -> storm key: announced in a storm summary


def group_key(group_by: Sequence[str], alert: Alert) -> tuple[str, dict[str, str]]:
    """The alert group an alert belongs to, by the `group_by` labels, as (key, labels)."""
    # `rule` as routes and silences take it (Alertmanager's alertname): not a label, it grouped nothing.
    labels = {name: alert.rule if name == "rule" else alert.labels.get(name, "") for name in group_by}
    return "|".join(f"{key_part(k)}={key_part(v)}" for k, v in labels.items()), labels


def told_anyone(group: AlertGroup | None, alert_key: str) -> bool:
    """Whether any receiver has the alert as firing (told of it, its end not yet told)."""
    return group is not None and any(alert_key in told for told in group.notified.values())


def record(group: AlertGroup, receiver: str, current: dict[str, Severity], now: float) -> None:
    """The receiver was told `current` (alert key -> severity) now; nothing at all once everything ended."""
    if current:
        group.notified[receiver], group.last_notified_at[receiver] = current, now
    else:
        group.notified.pop(receiver, None)
        group.last_notified_at.pop(receiver, None)
        group.storm.pop(receiver, None)


def kind_due(
    config: AlertsConfig,
    told: dict[str, Severity],
    last_at: float | None,
    firing: list[Alert],
    current: dict[str, Severity],
    left: list[Alert],
    now: float,
) -> NotificationKind | None:
    """What the receiver is owed now for one group, if anything: `told` what it has, `current` what fires for it
    now, `left` what it has that ended for it."""
    if not told:
        if last_at is not None and now - last_at < config.group_interval_s:
            return None  # its last announcement never arrived (undelivered): not at every poll
        if firing and now - min(now if a.fired_at is None else a.fired_at for a in firing) >= config.group_wait_s:
            return NotificationKind.FIRING
        return None
    since_last = now - (last_at or 0.0)
    gone = {a.key for a in left}
    announced = {k: s for k, s in told.items() if k in current or k in gone}
    if current != announced or left:
        if since_last < config.group_interval_s:
            return None
        if not current:
            if config.send_resolved:
                return NotificationKind.RESOLVED
            told.clear()
            return None
        return NotificationKind.UPDATE
    if current and since_last >= config.repeat_interval_s:
        return NotificationKind.REPEAT
    return None


def compose(
    notification_id: str,
    group: AlertGroup,
    receiver: str,
    kind: NotificationKind,
    firing: list[Alert],
    left: list[Alert],
    now: float,
    muted: Sequence[Alert] = (),
) -> Notification:
    """The notification of one group for one receiver: its firing alerts, worst first, each marked with what the
    receiver had of it; then those ended for it."""
    hushed = {a.key for a in muted}
    told = group.notified.get(receiver, {})  # before this notification is recorded
    # Ended for this receiver now, if not before (a pending alert, or one below its route, has no resolved_at),
    # at the severity it was told: a receiver that knows alerts by their severity (Alertmanager's labels) ends
    # the one it has. Muted ones (silenced, inhibited) end for it too, marked so.
    ended = [
        AlertRecord.of(
            a,
            state=AlertState.RESOLVED,
            severity=told.get(a.key, a.severity),
            resolved_at=a.resolved_at if a.state == AlertState.RESOLVED else now,
            muted=a.key in hushed,
        )
        for a in sorted([*left, *muted], key=lambda a: a.key)
    ]
    alerts = []
    for a in sorted(firing, key=lambda a: (-a.severity.rank, a.key)):
        before = told.get(a.key)
        # first_told: if it never arrives, the receiver never had this alert (undelivered); previous_severity:
        # escalated or eased since it was told, that one has ended.
        alerts.append(
            AlertRecord.of(
                a,
                first_told=before is None,
                previous_severity=before if before is not None and before != a.severity else None,
            )
        )
    return Notification(
        id=notification_id,
        group_key=group.key,
        group_labels=dict(group.labels),
        kind=kind,
        severity=worst(a.severity for a in firing),
        created_at=now,
        alerts=(*alerts, *ended),
        receiver=receiver,
    )


def undo(
    groups: dict[str, AlertGroup],
    alerts: dict[str, Alert],
    receiver: str,
    group_key: str,
    labels: Mapping[str, str],
    records: Iterable[AlertRecord],
) -> None:
    """What the receiver was told goes back to what it had before a notification of these `records` (one that it
    will never get)."""
    group = groups.get(group_key)
    if group is None:  # let go once its last "resolved" was decided: back, to resolve again
        group = groups[group_key] = AlertGroup(group_key, dict(labels))
    told = group.notified.setdefault(receiver, {})
    for a in records:
        if a.state == AlertState.FIRING:
            if a.first_told:
                told.pop(a.key, None)
            elif a.previous_severity is not None:
                told[a.key] = a.previous_severity
        elif a.state == AlertState.RESOLVED:
            told[a.key] = a.severity  # it still has it as firing: the resolve is owed again
            if a.key not in alerts:  # let go once the resolve was queued: back, to be resolved again
                fields = {name: getattr(a, name) for name in ALERT_FIELDS}
                alerts[a.key] = Alert(**{**fields, "labels": dict(a.labels), "details": dict(a.details)})
    if not told:  # last_notified_at stays: the group is announced again after group_interval, not at once
        group.notified.pop(receiver, None)


def records_of_row(raw: Iterable[Any]) -> list[AlertRecord]:
    """The alerts of a damaged outbox row that can still be read (the others are left as they are)."""
    out = []
    for a in raw:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            out.append(AlertRecord.from_json(a))
    return out


def load_group(raw: dict[str, Any], receivers: tuple[Receiver, ...]) -> AlertGroup:
    """A saved alert group, with what receivers no longer configured were told let go."""
    g = dict(raw)
    g.pop("refs", None)
    notified = g.get("notified") or {}
    if notified and isinstance(next(iter(notified.values())), str):
        # Written before receivers had their own memory: every receiver was told the same.
        g["notified"] = {r.name: dict(notified) for r in receivers}
        g["last_notified_at"] = {r.name: g.get("last_notified_at") or 0.0 for r in receivers}
    elif not isinstance(g.get("last_notified_at", {}), dict):
        g["last_notified_at"] = {}
    # What receivers no longer configured (removed, or disabled) were told is let go: it would keep every alert
    # they saw, resolved or not, in the book for ever, and send them stale resolves were they enabled again.
    names = {r.name for r in receivers}
    for memory in ("notified", "last_notified_at", "storm"):
        if isinstance(g.get(memory), dict):
            g[memory] = {r: v for r, v in g[memory].items() if r in names}
    if isinstance(g.get("notified"), dict):  # severities as their enum (any other text: the row is set aside)
        g["notified"] = {
            r: {k: SEVERITY_OF.get(v, v) for k, v in told.items()} if isinstance(told, dict) else told
            for r, told in g["notified"].items()
        }
    return from_row(AlertGroup, g)
