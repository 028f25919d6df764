"""What a notifier is: something that delivers one notification, or raises."""

from __future__ import annotations

from typing import Any, Protocol

from lagwatch.alerts import Notification


class DeliveryError(Exception):
    """A notification could not be delivered this time; the dispatcher retries it later."""


class Notifier(Protocol):
    name: str

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        """Delivers `notification`. `ref` is what this notifier returned for the group's previous notification
        (to update a message in place); the return value is kept for the next one. Raises on failure."""
        ...
