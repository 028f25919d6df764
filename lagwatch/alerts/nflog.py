"""The notification log: what each receiver was told of each alert group, and when (Alertmanager's nflog).

It decides what a receiver is owed now: its first notification after `group_wait`, changes at most every
`group_interval`, an unchanged firing group again after `repeat_interval`, and a last one when all ended. Each
receiver remembers on its own, so none gets a "resolved" for an alert it never saw.

What a receiver *has* (`AlertGroup.told`) is written when a delivery succeeds, as Alertmanager's nflog is. What
it *will have* once its queued notifications arrive is what the last of them tells (`NotificationLog.in_flight`):
decisions are made on that, so nothing is announced twice while a notification waits for Slack. A notification
that is never delivered (refused for good, or too old) leaves the queue, and the receiver's view falls back to what
it has: nothing to undo. Timers (`last_notified_at`) count from decisions, delivered or not: a receiver that
refuses is not asked again at every poll.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lagwatch.alerts.groups import AlertGroup
from lagwatch.alerts.records import (
    ALERT_FIELDS,
    Alert,
    AlertRecord,
    AlertState,
    Notification,
    NotificationKind,
)
from lagwatch.alerts.settings import AlertsConfig
from lagwatch.model import Severity, worst


@dataclass
class InFlight:
    """A notification decided for a receiver and not yet delivered: what the receiver will have once it is."""

    notification_id: str
    told_after: dict[str, Severity]


class NotificationLog:
    """Per alert group and receiver: what it has (delivered, in the group) and what it will have (in flight)."""

    def __init__(self, groups: dict[str, AlertGroup]) -> None:
        self.groups = groups
        self.in_flight: dict[str, dict[str, list[InFlight]]] = {}  # group key -> receiver -> oldest first

    def told(self, group: AlertGroup, receiver: str) -> dict[str, Severity]:
        """What the receiver will have of the group once its queued notifications arrive (the dict itself:
        `due` lets alerts gone from the book leave it quietly)."""
        queued = self.in_flight.get(group.key, {}).get(receiver)
        if queued:
            return queued[-1].told_after
        told = group.told(receiver)
        return {} if told is None else told

    def views(self, group: AlertGroup) -> list[dict[str, Severity]]:
        receivers = set(group.told_receivers()) | set(self.in_flight.get(group.key, ()))
        return [self.told(group, r) for r in receivers]

    def told_anyone(self, group: AlertGroup | None, alert_key: str) -> bool:
        """Whether any receiver has, or will have, the alert as firing (its end not yet told)."""
        return group is not None and any(alert_key in told for told in self.views(group))

    def needed(self, group: AlertGroup) -> set[str]:
        """The alerts some receiver will have as firing: their end is owed."""
        return {k for told in self.views(group) for k in told}

    def busy(self, group: AlertGroup) -> bool:
        """Whether the group must be kept though nothing is owed: a receiver has some of it, or will (a queued
        notification that is given up leaves the receiver with what it has, whose end is then owed)."""
        return group.anything_told() or bool(self.in_flight.get(group.key))

    def decided(
        self, group: AlertGroup, receiver: str, notification_id: str, current: dict[str, Severity], now: float
    ) -> None:
        """A notification that tells the receiver `current` (alert key -> severity) was queued now."""
        self.in_flight.setdefault(group.key, {}).setdefault(receiver, []).append(InFlight(notification_id, current))
        _timers(group, receiver, bool(current), now)

    def quietly(self, group: AlertGroup, receiver: str, current: dict[str, Severity], now: float) -> None:
        """The receiver knows `current` without a notification of this group (a storm's summary tells it): what it
        has, at once; notifications of the group still queued no longer say what it will have."""
        self._forget_queue(group.key, receiver)
        group.set_told(receiver, current or None)
        _timers(group, receiver, bool(current), now)

    def delivered(self, n: Notification) -> AlertGroup | None:
        """`n` reached its receiver: the receiver has what it told (and what any notification of the group queued
        before it told). Returns the group whose memory changed, None if none did (a storm's summary, or a
        notification a quiet record has overtaken)."""
        queued = self.in_flight.get(n.group_key, {}).get(n.receiver)
        at = next((i for i, q in enumerate(queued or ()) if q.notification_id == n.id), None)
        if queued is None or at is None:
            return None
        told = queued[at].told_after
        del queued[: at + 1]
        if not queued:
            self._forget_queue(n.group_key, n.receiver)
        group = self.groups.get(n.group_key)
        if group is None:  # let go since (its last notification decided): back, with what the receiver has
            group = self.groups[n.group_key] = AlertGroup(n.group_key, dict(n.group_labels))
        group.set_told(n.receiver, dict(told) if told else None)
        return group

    def undelivered(self, dropped: Sequence[Notification], alerts: dict[str, Alert]) -> None:
        """Notifications of one receiver and one group, oldest first, that it will never get: they leave the queue,
        and the receiver's view falls back to what it has (or will have from those still before them). Alerts it
        has that were let go once their end was decided come back, resolved, so that their end is told again."""
        if not dropped:
            return
        first = dropped[0]
        gone = {n.id for n in dropped}
        queued = self.in_flight.get(first.group_key, {}).get(first.receiver)
        if queued:
            queued[:] = [q for q in queued if q.notification_id not in gone]
            if not queued:
                self._forget_queue(first.group_key, first.receiver)
        group = self.groups.get(first.group_key)
        if group is None:
            return
        told = self.told(group, first.receiver)
        for n in dropped:
            restore_resolved(alerts, told, n.alerts)

    def resume(self, queued: Iterable[Notification], receivers: Iterable[str]) -> None:
        """After a start: the notifications still queued (oldest first) for the receivers configured."""
        names = set(receivers)
        for n in queued:
            if n.storm is None and n.receiver in names:
                current = {a.key: a.severity for a in n.alerts if a.state == AlertState.FIRING}
                self.in_flight.setdefault(n.group_key, {}).setdefault(n.receiver, []).append(InFlight(n.id, current))

    def _forget_queue(self, group_key: str, receiver: str) -> None:
        queues = self.in_flight.get(group_key)
        if queues is not None:
            queues.pop(receiver, None)
            if not queues:
                del self.in_flight[group_key]


def _timers(group: AlertGroup, receiver: str, firing: bool, now: float) -> None:
    if firing:
        group.set_last_notified(receiver, now)
    else:  # the story ended for this receiver: a new one starts after group_wait
        group.story_ended(receiver)


def restore_resolved(alerts: dict[str, Alert], told: Mapping[str, Severity], records: Iterable[AlertRecord]) -> None:
    """Alerts told as ended in a notification never delivered, that the receiver still has and the book let go: back
    in the book as resolved, so that their end is told again (a resolve dropped as too old, after a long outage,
    left the receiver's message firing for good)."""
    for a in records:
        if a.state == AlertState.RESOLVED and a.key in told and a.key not in alerts:
            fields = {name: getattr(a, name) for name in ALERT_FIELDS}
            alerts[a.key] = Alert(**{**fields, "labels": dict(a.labels), "details": dict(a.details)})


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
    told: Mapping[str, Severity],
    kind: NotificationKind,
    firing: list[Alert],
    left: list[Alert],
    now: float,
    muted: Sequence[Alert] = (),
    regrouped: frozenset[str] = frozenset(),
) -> Notification:
    """The notification of one group for one receiver, given what it was `told` before: its firing alerts, worst
    first, each marked with what the receiver had of it; then those ended for it (`regrouped`: keys of alerts that
    left it for another group)."""
    hushed = {a.key for a in muted}
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
            regrouped=a.key in regrouped,
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


def records_of_row(raw: Iterable[Any]) -> list[AlertRecord]:
    """The alerts of a damaged outbox row that can still be read (the others are left as they are)."""
    out = []
    for a in raw:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            out.append(AlertRecord.from_json(a))
    return out
