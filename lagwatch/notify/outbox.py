"""Notifications waiting for delivery, per notifier, persisted with the alert state: nothing decided is lost
across a restart, and nothing delivered is sent again."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts import Notification


@dataclass
class Delivery:
    notification: Notification
    notifier: str
    attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "notification": self.notification.to_json(),
            "notifier": self.notifier,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at,
            "last_error": self.last_error,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Delivery:
        return cls(
            notification=Notification.from_json(raw["notification"]),
            notifier=raw["notifier"],
            attempts=raw.get("attempts", 0),
            next_attempt_at=raw.get("next_attempt_at", 0.0),
            last_error=raw.get("last_error"),
        )


@dataclass
class Outbox:
    deliveries: list[Delivery] = field(default_factory=list)
    # Where each notifier's message for an alert group lives (e.g. a Slack channel and ts), to update it in place.
    refs: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @staticmethod
    def ref_key(notifier: str, group_key: str) -> str:
        return f"{notifier}|{group_key}"

    def add(self, notifications: list[Notification], notifiers: list[str]) -> None:
        if not notifications:
            return
        with self.changed:
            for n in notifications:
                self.deliveries.extend(Delivery(n, name) for name in notifiers)
            self.changed.notify_all()

    def due(self, now: float) -> list[Delivery]:
        """Deliveries to attempt now: per notifier and group only the oldest, so that order is kept."""
        with self.changed:
            blocked: set[tuple[str, str]] = set()
            ready = []
            for d in self.deliveries:
                lane = (d.notifier, d.notification.group_key)
                if lane in blocked:
                    continue
                blocked.add(lane)
                if d.next_attempt_at <= now:
                    ready.append(d)
            return ready

    def next_attempt(self) -> float | None:
        with self.changed:
            return min((d.next_attempt_at for d in self.deliveries), default=None)

    def done(self, delivery: Delivery, ref: dict[str, Any] | None) -> None:
        with self.changed:
            self.deliveries = [d for d in self.deliveries if d is not delivery]
            key = self.ref_key(delivery.notifier, delivery.notification.group_key)
            if delivery.notification.kind == "resolved":
                self.refs.pop(key, None)
            elif ref is not None:
                self.refs[key] = ref

    def pending(self) -> int:
        with self.changed:
            return len(self.deliveries)

    def to_json(self) -> dict[str, Any]:
        with self.changed:
            return {"deliveries": [d.to_json() for d in self.deliveries], "refs": dict(self.refs)}

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> Outbox:
        if not raw:
            return cls()
        return cls(
            deliveries=[Delivery.from_json(d) for d in raw.get("deliveries", [])], refs=dict(raw.get("refs", {}))
        )
