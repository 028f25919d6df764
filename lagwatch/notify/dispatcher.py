"""Delivers the outbox with one worker thread per notifier: a slow, rate-limited or failing notifier (a Slack
Retry-After of a minute, a webhook timing out) never delays another notifier, nor a poll.

A worker never dies of an error. A notifier's `send` returns, or raises:
- `PermanentError`: recorded (counter, last error, one log line with the notification id) and dropped, so the
  group's later notifications go on;
- `RetryableError` / `DeliveryError`, or anything unexpected: retried with capped exponential backoff and jitter
  (or the receiver's Retry-After), until the notification is older than `max_age_s`; then it is dropped, recorded.
`persist()` (which writes the outbox to disk) may fail too (disk full, read-only, out of file descriptors): the
worker counts it, logs the first failure of a streak with its traceback, keeps delivering from memory and saves
again later. Any other exception in a worker's loop is counted, logged with its traceback, and the loop goes on.

Order is kept per notifier and alert group (see `Outbox.due`). `health()` tells how each worker is doing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lagwatch.notify.base import DeliveryError, Notifier, PermanentError, RetryableError
from lagwatch.notify.outbox import Delivery, Outbox
from lagwatch.notify.settings import DEFAULT_MAX_AGE_S

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0  # retries are at most this far apart, until the notification's maximum age
PERSIST_RETRY_S = 5.0  # how often a worker tries again to save the state after a failed save
LOOP_ERROR_PAUSE_S = 1.0  # after an unexpected error in the loop: no busy loop if it repeats
IDLE_WAIT_S = 1.0  # an idle worker looks again at least this often (also: how soon it sees stop())
_ERROR_TEXT_MAX = 300


@dataclass(frozen=True)
class WorkerHealth:
    """One notifier's worker, for the daemon's health endpoint and metrics. Counters count since start."""

    notifier: str
    alive: bool  # its thread runs
    queued: int  # deliveries waiting in the outbox for this notifier
    delivered: int
    retried: int  # failed attempts that will be tried again
    failed_permanent: int  # deliveries given up because the receiver refused them for good
    dropped_expired: int  # deliveries given up because they got older than max_age_s
    persist_failures: int  # failed saves of the state (the worker went on from memory)
    unexpected_errors: int  # exceptions that are not a delivery error: a bug, logged with the traceback
    last_error: str | None
    last_error_at: float | None


class _Counters:
    """Mutable counters of one worker, read by other threads through `Dispatcher.health()`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered = 0
        self.retried = 0
        self.failed_permanent = 0
        self.dropped_expired = 0
        self.persist_failures = 0
        self.unexpected_errors = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None

    def error(self, text: str, at: float) -> None:
        with self.lock:
            self.last_error, self.last_error_at = text[:_ERROR_TEXT_MAX], at


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:_ERROR_TEXT_MAX]


class _Worker:
    def __init__(self, name: str, notifier: Notifier, dispatcher: Dispatcher) -> None:
        self.name = name
        self.notifier = notifier
        self.outbox = dispatcher.outbox
        self._persist_state = dispatcher.persist
        self._clock = dispatcher.clock
        self._stop = dispatcher.stopping
        self._max_age_s = dispatcher.max_age_s
        self._rng = dispatcher.rng
        self.counters = _Counters()
        self._persist_owed = False  # a save failed: the state on disk is behind what is in memory
        self._persist_retry_at = 0.0
        self.thread = threading.Thread(target=self._run, name=f"lagwatch-notify-{name}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._cycle()
            except Exception as e:  # a bug in here must never end this notifier's deliveries for good
                with self.counters.lock:
                    self.counters.unexpected_errors += 1
                self.counters.error(_describe(e), self._safe_now())
                log.exception("notifier worker error; it carries on", extra={"notifier": self.name})
                self._stop.wait(LOOP_ERROR_PAUSE_S)

    def _safe_now(self) -> float:
        try:
            return self._clock()
        except Exception:
            return 0.0

    def _cycle(self) -> None:
        if self._persist_owed and self._clock() >= self._persist_retry_at:
            self._persist()
        for delivery in self.outbox.due(self._clock(), self.name):
            if self._stop.is_set():
                return
            self._handle(delivery)
        with self.outbox.changed:
            if self._stop.is_set():
                return
            next_at = self.outbox.next_attempt(self.name)
            wait = IDLE_WAIT_S if next_at is None else min(IDLE_WAIT_S, max(0.0, next_at - self._clock()))
            if wait > 0:
                self.outbox.changed.wait(wait)

    def _handle(self, delivery: Delivery) -> None:
        notification = delivery.notification
        now = self._clock()
        age = now - notification.created_at
        if age > self._max_age_s:
            self.outbox.discard(delivery)
            with self.counters.lock:
                self.counters.dropped_expired += 1
            self.counters.error(f"expired after {age:.0f}s undelivered: {delivery.last_error}", now)
            log.error(
                "notification dropped: older than notifiers.max_age_s and still not delivered",
                extra={
                    "notifier": self.name,
                    "notification_id": notification.id,
                    "group_key": notification.group_key,
                    "kind": notification.kind,
                    "age_s": round(age),
                    "attempts": delivery.attempts,
                    "error": delivery.last_error,
                },
            )
            self._persist()
            return
        ref = self.outbox.refs.get(Outbox.ref_key(self.name, notification.group_key))
        checks = getattr(self.notifier, "checks_duplicates", False)
        maybe_sent = delivery.in_flight
        if checks and not delivery.in_flight:
            # Saved before the call: if lagwatch dies during it, the next run knows to look before sending again.
            delivery.in_flight = True
            self._persist()
        try:
            if checks:
                new_ref = self.notifier.send(notification, ref, maybe_sent=maybe_sent)  # type: ignore[call-arg]
            else:
                new_ref = self.notifier.send(notification, ref)
        except PermanentError as e:
            self.outbox.discard(delivery)
            with self.counters.lock:
                self.counters.failed_permanent += 1
            self.counters.error(_describe(e), now)
            log.error(
                "notification refused for good, dropped",
                extra={
                    "notifier": self.name,
                    "notification_id": notification.id,
                    "group_key": notification.group_key,
                    "kind": notification.kind,
                    "error": str(e)[:_ERROR_TEXT_MAX],
                },
            )
            self._persist()
            return
        except Exception as e:  # RetryableError, a bare DeliveryError, or a surprise: all are tried again
            self._schedule_retry(delivery, e, now)
            self._persist()
            return
        with self.counters.lock:
            self.counters.delivered += 1
        self.outbox.done(delivery, new_ref)
        self._persist()

    def _schedule_retry(self, delivery: Delivery, error: Exception, now: float) -> None:
        delivery.attempts += 1
        backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(delivery.attempts - 1, 30))
        # Jitter: after an outage, the retries of many deliveries do not all hit the receiver in the same second.
        delay = backoff * self._rng.uniform(0.5, 1.0)
        hint = error.retry_after_s if isinstance(error, RetryableError) else None
        if hint is not None:
            delay = max(delay, min(hint, BACKOFF_MAX_S))
        delivery.next_attempt_at = now + delay
        delivery.last_error = _describe(error)
        expected = isinstance(error, DeliveryError)
        with self.counters.lock:
            self.counters.retried += 1
            if not expected:
                self.counters.unexpected_errors += 1
        self.counters.error(delivery.last_error, now)
        log.warning(
            "notification not delivered, will retry",
            exc_info=not expected,  # a notifier should only raise delivery errors: the traceback shows the bug
            extra={
                "notifier": self.name,
                "notification_id": delivery.notification.id,
                "attempts": delivery.attempts,
                "retry_in_s": round(delay, 1),
                "error": delivery.last_error,
            },
        )

    def _persist(self) -> None:
        try:
            self._persist_state()
        except Exception:
            with self.counters.lock:
                self.counters.persist_failures += 1
            if not self._persist_owed:  # once per streak: a full disk must not flood the log
                log.exception(
                    "saving the alert state failed; delivering from memory, will save again",
                    extra={"notifier": self.name, "retry_in_s": PERSIST_RETRY_S},
                )
            self._persist_owed = True
            self._persist_retry_at = self._clock() + PERSIST_RETRY_S
            return
        if self._persist_owed:
            log.warning("alert state saved again after failed saves", extra={"notifier": self.name})
        self._persist_owed = False

    def health(self) -> WorkerHealth:
        c = self.counters
        with c.lock:
            return WorkerHealth(
                notifier=self.name,
                alive=self.thread.is_alive(),
                queued=self.outbox.pending(self.name),
                delivered=c.delivered,
                retried=c.retried,
                failed_permanent=c.failed_permanent,
                dropped_expired=c.dropped_expired,
                persist_failures=c.persist_failures,
                unexpected_errors=c.unexpected_errors,
                last_error=c.last_error,
                last_error_at=c.last_error_at,
            )


class Dispatcher:
    def __init__(
        self,
        outbox: Outbox,
        notifiers: Mapping[str, Notifier],
        persist: Callable[[], None],
        clock: Callable[[], float] = time.time,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        rng: random.Random | None = None,
    ) -> None:
        self.outbox = outbox
        self.notifiers = dict(notifiers)
        self.persist = persist
        self.clock = clock
        self.max_age_s = max_age_s
        self.rng = rng or random.Random()
        self.stopping = threading.Event()
        self._workers = {name: _Worker(name, notifier, self) for name, notifier in self.notifiers.items()}

    @property
    def delivered(self) -> int:
        return sum(h.delivered for h in self.health().values())

    @property
    def failed_attempts(self) -> int:
        """Every attempt that failed, whether retried or given up."""
        return sum(h.retried + h.failed_permanent for h in self.health().values())

    def health(self) -> dict[str, WorkerHealth]:
        return {name: worker.health() for name, worker in self._workers.items()}

    def start(self) -> Dispatcher:
        self._drop_orphans()
        for worker in self._workers.values():
            worker.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Asks every worker to stop and waits up to `timeout` in all. A worker inside a slow send (Slack sleeping
        out a Retry-After) finishes it first; its thread is a daemon, so it never holds the process up."""
        self.stopping.set()
        with self.outbox.changed:
            self.outbox.changed.notify_all()
        deadline = time.monotonic() + timeout
        for worker in self._workers.values():
            if worker.thread.is_alive():
                worker.thread.join(max(0.0, deadline - time.monotonic()))

    def _drop_orphans(self) -> None:
        """Deliveries restored for a notifier that is no longer configured would wait forever: drop them."""
        with self.outbox.changed:
            orphans = [d for d in self.outbox.deliveries if d.notifier not in self._workers]
            for delivery in orphans:
                self.outbox.discard(delivery)
        for delivery in orphans:
            log.error(
                "no such notifier; dropping its delivery",
                extra={"notifier": delivery.notifier, "notification_id": delivery.notification.id},
            )
        if orphans:
            try:
                self.persist()
            except Exception:  # the workers save again with their next change
                log.exception("saving the alert state failed")
