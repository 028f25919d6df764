"""What a notifier is: something that delivers one notification, or raises one of the errors below.

The dispatcher decides what happens next from the error's class alone:
- `RetryableError` (and a bare `DeliveryError`): tried again later, with backoff, until the notification's
  maximum age. Outages, timeouts, 5xx, 408 and 429.
- `PermanentError`: never tried again; recorded and removed, so that it does not block the group's later
  notifications. Bad credentials, unknown or archived channels, a payload the receiver rejects (4xx).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from lagwatch.alerts import Notification


class DeliveryError(Exception):
    """A notification could not be delivered this time. Raised as such, it is retried (like RetryableError)."""


class RetryableError(DeliveryError):
    """The receiver may take it later. `retry_after_s` is the receiver's own hint (HTTP Retry-After), if any.
    `maybe_acted`: the receiver may have taken it all the same (a timeout, a 5xx, a dropped connection); False
    for a refusal it answered (429, a Slack error), after which nothing needs looking for before the next try."""

    def __init__(self, message: str, retry_after_s: float | None = None, maybe_acted: bool = True) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.maybe_acted = maybe_acted


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
    return RetryableError(message, parse_retry_after(retry_after), maybe_acted=not 400 <= status < 500)


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


T = TypeVar("T")
HUNG_CALLS_MAX = 2  # calls of one notifier given up on and still running: beyond this, no new call is made


def call_deadline_s(timeout_s: float) -> float:
    """How long a whole call may take, with `timeout_s` for each of its steps (connect, each read)."""
    return 2 * timeout_s + 1


class Deadline:
    """A whole HTTP call bounded in time: the call runs on a thread of its own, and is given up on `seconds` after
    it began. urllib's and slack-sdk's timeouts bound each read, not a request: a receiver that answered a byte a
    second held a notifier's worker for good, its deliveries stuck and /readyz green. A call given up on is a
    retryable failure that may have reached the receiver (as a timeout is); it may still end on its own thread.
    While HUNG_CALLS_MAX of them still run, no new call is made (threads do not pile up on a receiver that hangs)."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        self._hung: list[threading.Thread] = []

    def run(self, call: Callable[[], T]) -> T:
        self._hung = [t for t in self._hung if t.is_alive()]
        if len(self._hung) >= HUNG_CALLS_MAX:
            raise RetryableError(f"{self.what}: {len(self._hung)} earlier calls still hang (no answer in full)")
        outcome: list[Any] = []

        def target() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as e:  # handed to the caller's thread as it is
                outcome.append((False, e))

        thread = threading.Thread(target=target, name=f"lagwatch-call-{self.what}", daemon=True)
        thread.start()
        thread.join(self.seconds)
        if thread.is_alive() or not outcome:
            self._hung.append(thread)
            raise RetryableError(f"{self.what}: no full answer within {self.seconds:.0f} s")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]
