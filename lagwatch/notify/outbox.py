"""Notifications waiting for delivery, per notifier, persisted with the alert state: nothing decided is lost
across a restart, and nothing delivered is sent again."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts import AlertState, Notification, NotificationKind
from lagwatch.model import from_row


@dataclass
class Delivery:
    notification: Notification
    notifier: str
    attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None
    # An attempt began and its outcome is unknown (it failed, or lagwatch died during it): the receiver may have
    # it already. Saved before a notifier that can check for duplicates is called.
    in_flight: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "notification": self.notification.to_json(),
            "notifier": self.notifier,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at,
            "last_error": self.last_error,
            "in_flight": self.in_flight,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Delivery:
        return from_row(  # each field of its type: an `attempts` of text stopped the receiver's worker
            cls,
            {
                "notification": Notification.from_json(raw["notification"]),
                "notifier": raw["notifier"],
                "attempts": raw.get("attempts", 0),
                "next_attempt_at": raw.get("next_attempt_at", 0.0),
                "last_error": raw.get("last_error"),
                "in_flight": bool(raw.get("in_flight", False)),
            },
        )


@dataclass
class Outbox:
    deliveries: list[Delivery] = field(default_factory=list)
    # Where each notifier's message for an alert group lives (e.g. a Slack channel and ts), to update it in place.
    refs: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False)
    collapsed: int = 0  # stale repeats dropped because a newer notification of the group was queued
    # What changed since a save last wrote it (row key -> the delivery, None once it left; message references):
    # the save after a delivery writes that delivery's rows, not a diff of the whole outbox, which at 10,000
    # queued took 38 ms a delivery and held the drain to a tenth of Slack's rate (bench/notify_drain_bench.py).
    unsaved_deliveries: dict[str, Delivery | None] = field(default_factory=dict, repr=False)
    unsaved_refs: set[str] = field(default_factory=set, repr=False)

    @staticmethod
    def ref_key(notifier: str, group_key: str) -> str:
        return f"{notifier}|{group_key}"

    @staticmethod
    def row_key(delivery: Delivery) -> str:
        return f"{delivery.notifier}|{delivery.notification.id}"

    def touch(self, delivery: Delivery) -> None:
        """After a change of the delivery's fields (attempts, retry time, error, in flight): the next save writes it."""
        with self.changed:
            self.unsaved_deliveries[self.row_key(delivery)] = delivery

    def add(self, notifications: list[Notification], notifiers: list[str]) -> None:
        if not notifications:
            return
        with self.changed:
            for n in notifications:
                for name in notifiers:
                    delivery = Delivery(n, name)
                    self.deliveries.append(delivery)
                    self.unsaved_deliveries[self.row_key(delivery)] = delivery
            self.changed.notify_all()

    def due(self, now: float, notifier: str | None = None) -> list[Delivery]:
        """Deliveries to attempt now (of one notifier, or all): per notifier and group only the oldest, so that
        order is kept. A repeat with a newer notification of the same group queued behind it is stale (a receiver
        that was down would get a burst of old "still firing"): it is dropped, and the newer one says it all."""
        with self.changed:
            queued: dict[tuple[str, str], int] = {}
            for d in self.deliveries:
                lane = (d.notifier, d.notification.group_key)
                queued[lane] = queued.get(lane, 0) + 1
            blocked: set[tuple[str, str]] = set()
            ready = []
            stale = []
            for d in self.deliveries:
                if notifier is not None and d.notifier != notifier:
                    continue
                lane = (d.notifier, d.notification.group_key)
                if lane in blocked:
                    continue
                if queued[lane] > 1 and _superseded(d.notification):
                    stale.append(d)
                    queued[lane] -= 1
                    continue
                blocked.add(lane)
                if d.next_attempt_at <= now:
                    ready.append(d)
            if stale:
                dropped = {id(d) for d in stale}
                self.deliveries = [d for d in self.deliveries if id(d) not in dropped]
                self.collapsed += len(stale)
                for d in stale:
                    self.unsaved_deliveries[self.row_key(d)] = None
            return ready

    def next_attempt(self, notifier: str | None = None) -> float | None:
        """When the next delivery (of one notifier, or any) can be attempted. Only the head of each lane counts:
        a delivery queued behind one that waits for a retry is not due before it (counting it made a busy loop)."""
        with self.changed:
            heads: dict[tuple[str, str], float] = {}
            for d in self.deliveries:
                if notifier is None or d.notifier == notifier:
                    heads.setdefault((d.notifier, d.notification.group_key), d.next_attempt_at)
            return min(heads.values(), default=None)

    def done(self, delivery: Delivery, ref: dict[str, Any] | None) -> None:
        with self.changed:
            self.deliveries = [d for d in self.deliveries if d is not delivery]
            self.unsaved_deliveries[self.row_key(delivery)] = None
            key = self.ref_key(delivery.notifier, delivery.notification.group_key)
            if delivery.notification.kind == "resolved":
                if self.refs.pop(key, None) is not None:
                    self.unsaved_refs.add(key)
            elif ref is not None:
                self.refs[key] = ref
                self.unsaved_refs.add(key)

    def discard(self, delivery: Delivery) -> None:
        """Drops a delivery without a word to the alert book (its notifier is gone). The message reference stays."""
        with self.changed:
            self.deliveries = [d for d in self.deliveries if d is not delivery]
            self.unsaved_deliveries[self.row_key(delivery)] = None

    def give_up(self, delivery: Delivery) -> list[Notification]:
        """Gives a delivery up (refused for good, or too old) with every delivery queued behind it in its lane (the
        same notifier and alert group), which were decided on what it said; returns their notifications, oldest
        first, for the alert book to undo (AlertBook.undelivered). The message reference stays as it was: the
        receiver still has the message that went out, which what is sent next (a "resolved" owed again) updates."""
        lane = (delivery.notifier, delivery.notification.group_key)
        with self.changed:
            start = next((i for i, d in enumerate(self.deliveries) if d is delivery), None)
            if start is None:
                return []
            behind = [d for d in self.deliveries[start + 1 :] if (d.notifier, d.notification.group_key) == lane]
            gone = {id(delivery), *map(id, behind)}
            self.deliveries = [d for d in self.deliveries if id(d) not in gone]
            for d in (delivery, *behind):
                self.unsaved_deliveries[self.row_key(d)] = None
            return [delivery.notification, *(d.notification for d in behind)]

    def pending(self, notifier: str | None = None) -> int:
        with self.changed:
            return sum(1 for d in self.deliveries if notifier is None or d.notifier == notifier)

    def to_json(self) -> dict[str, Any]:
        with self.changed:
            return {"deliveries": [d.to_json() for d in self.deliveries], "refs": dict(self.refs)}

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None, rejected: list[tuple[str, str, Any]] | None = None) -> Outbox:
        """Restores the queued deliveries one by one: a row of another shape (a newer lagwatch, a hand edit) is
        left out and reported in `rejected` as (row key, why, the row as read); every other delivery is kept."""
        if not raw:
            return cls()
        deliveries = []
        for row in raw.get("deliveries", []):
            try:
                deliveries.append(Delivery.from_json(row))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                if rejected is None:
                    raise
                notification = row.get("notification") if isinstance(row, dict) else None
                notification = notification if isinstance(notification, dict) else {}
                key = f"{row.get('notifier')}|{notification.get('id')}" if isinstance(row, dict) else repr(row)[:80]
                rejected.append((key, f"{type(e).__name__}: {e}", row))
        return cls(deliveries=deliveries, refs=dict(raw.get("refs", {})))


def _superseded(n: Notification) -> bool:
    """A repeat says only "still firing": a newer notification of the same group says more. (Updates are kept:
    every change reaches every receiver, in order.) Not a repeat that also tells of an end (an alert muted since,
    told as ended): dropped, its end was told nowhere, and a webhook kept that alert firing for good."""
    return n.kind == NotificationKind.REPEAT and all(a.state != AlertState.RESOLVED for a in n.alerts)
