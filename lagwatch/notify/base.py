"""What a notifier is: something that delivers one notification, or raises one of the errors below.

The dispatcher decides what happens next from the error's class alone:
- `RetryableError` (and a bare `DeliveryError`): tried again later, with backoff, until the notification's
  maximum age. Outages, timeouts, 5xx, 408 and 429.
- `PermanentError`: never tried again; recorded and removed, so that it does not block the group's later
  notifications. Bad credentials, unknown or archived channels, a payload the receiver rejects (4xx).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from lagwatch.alerts import Notification


class DeliveryError(Exception):
    """A notification could not be delivered this time. Raised as such, it is retried (like RetryableError)."""


class RetryableError(DeliveryError):
    """The receiver may take it later. `retry_after_s` is the receiver's own hint (HTTP Retry-After), if any."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentError(DeliveryError):
    """Sending the same notification again cannot succeed: the dispatcher drops it and records why."""


class Notifier(Protocol):
    name: str

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        """Delivers `notification`. `ref` is what this notifier returned for the group's previous notification
        (to update a message in place); the return value is kept for the next one. Raises on failure."""
        ...


@runtime_checkable
class DigestPoster(Protocol):
    """A notifier that can also post a digest (the Spark report's daily summary): a title and a few lines of Slack
    mrkdwn. Once, no outbox: the report is on disk either way, and a failure is the job's one-line error."""

    name: str

    def post_digest(self, title: str, lines: list[str]) -> None: ...


def http_status_error(what: str, status: int, retry_after: str | None = None, detail: str = "") -> DeliveryError:
    """The error for an HTTP answer that is not a success: 4xx is permanent except 408 (timeout) and 429
    (rate limited); everything else (5xx, odd codes) may pass. `detail` (e.g. the body's error code) is appended."""
    message = f"{what}: HTTP {status}" + (f" {detail}" if detail else "")
    if 400 <= status < 500 and status not in (408, 429):
        return PermanentError(message)
    return RetryableError(message, parse_retry_after(retry_after))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; the HTTP-date form and nonsense give None (the dispatcher's backoff)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    # A finite, non-negative number of seconds; anything else is not a hint worth trusting.
    return seconds if 0 <= seconds < float("inf") else None
