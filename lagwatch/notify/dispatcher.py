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

A worker thread that dies all the same (a BaseException, a bug in the error path) is noticed by the dispatcher's
supervisor thread: one log line with the cause, the delivery it was attempting counted as a failed attempt (its
`in_flight` mark stays, so a notifier that `checks_duplicates` looks before sending again), and a new thread on the
same outbox: at once after the first death, then with capped exponential backoff while it keeps dying soon after
each start (no hot loop; `WorkerHealth.keeps_dying` makes /readyz say so).

Order is kept per notifier and alert group (see `Outbox.due`). `health()` tells how each worker is doing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lagwatch.alerts import Notification
from lagwatch.notify.base import DeliveryError, Notifier, PermanentError, RetryableError
from lagwatch.notify.outbox import Delivery, Outbox
from lagwatch.notify.settings import DEFAULT_MAX_AGE_S

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0  # retries are at most this far apart, until the notification's maximum age
RETRY_AFTER_MAX_S = 300.0  # a receiver's Retry-After is honoured up to this (a day's was slept out whole)
PERSIST_RETRY_S = 5.0  # how often a worker tries again to save the state after a failed save
LOOP_ERROR_PAUSE_S = 1.0  # after an unexpected error in the loop: no busy loop if it repeats
IDLE_WAIT_S = 1.0  # an idle worker looks again at least this often (also: how soon it sees stop())
SUPERVISE_S = 0.5  # how often the supervisor looks at the worker threads (a dying worker wakes it at once)
RESTART_BACKOFF_FIRST_S = 1.0  # a worker that dies again soon after a restart waits this long, then doubling
RESTART_BACKOFF_MAX_S = 300.0
RESTART_STABLE_S = 60.0  # a worker alive this long since its start has recovered: a later death restarts at once
KEEPS_DYING_AFTER = 3  # this many deaths in a row, each soon after its start: unready until it recovers
FAILING_AFTER_TURNS = 3  # turns of the loop failing in a row, LOOP_ERROR_PAUSE_S apart: unready until one succeeds
_ERROR_TEXT_MAX = 300


@dataclass(frozen=True)
class WorkerHealth:
    """One notifier's worker, for the daemon's health endpoint and metrics. Counters count since start."""

    notifier: str
    alive: bool  # its thread runs
    restarts: int  # its thread died and the supervisor started a new one
    keeps_dying: bool  # it died again soon after its last restarts: restarts are backed off, not ready
    queued: int  # deliveries waiting in the outbox for this notifier
    delivered: int
    retried: int  # failed attempts that will be tried again
    failed_permanent: int  # deliveries given up because the receiver refused them for good
    dropped_expired: int  # deliveries given up because they got older than max_age_s
    persist_failures: int  # failed saves of the state (the worker went on from memory)
    unexpected_errors: int  # exceptions that are not a delivery error: a bug, logged with the traceback
    last_error: str | None
    last_error_at: float | None
    # Its loop failed at every turn lately (a bug hit by every delivery, e.g. a queued row it cannot read): the
    # thread is alive but delivers nothing, which /readyz must say.
    failing_every_turn: bool = False


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
        self.restarts = 0
        self.deaths_in_a_row = 0  # each soon after the thread's start (see RESTART_STABLE_S)
        self.loop_errors_in_a_row = 0  # turns of the worker's loop that ended in an unexpected error, in a row
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
        self._wake_supervisor = dispatcher.wake_supervisor
        self._given_up = dispatcher.given_up
        self._delivered = dispatcher.on_delivered
        self.current: Delivery | None = None  # the delivery being handled: the supervisor reschedules it on a death
        self.died_of: BaseException | None = None  # set by the dying thread, taken by the supervisor
        self.started_at = 0.0  # time.monotonic() of the current thread's start
        self.restart_at: float | None = None  # dead, to be started again then (time.monotonic())
        self.thread = self._new_thread()

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._main, name=f"lagwatch-notify-{self.name}", daemon=True)

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.thread.start()

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as e:  # the thread ends here: the supervisor logs it and starts a new one
            self.died_of = e
            self._wake_supervisor()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._cycle()
                if self.counters.loop_errors_in_a_row:
                    with self.counters.lock:
                        self.counters.loop_errors_in_a_row = 0
            except Exception as e:  # a bug in here must never end this notifier's deliveries for good
                with self.counters.lock:
                    self.counters.unexpected_errors += 1
                    self.counters.loop_errors_in_a_row += 1
                self.counters.error(_describe(e), self._safe_now())
                log.exception("notifier worker error; it carries on", extra={"notifier": self.name})
                self._stop.wait(LOOP_ERROR_PAUSE_S)

    def _safe_now(self) -> float:
        try:
            return self._clock()
        except Exception:
            return 0.0

    def _cycle(self) -> None:
        self.current = None
        if self._persist_owed and self._clock() >= self._persist_retry_at:
            self._persist()
        for delivery in self.outbox.due(self._clock(), self.name):
            if self._stop.is_set():
                return
            self.current = delivery
            self._handle(delivery)
        with self.outbox.changed:
            if self._stop.is_set():
                return
            next_at = self.outbox.next_attempt(self.name)
            wait = IDLE_WAIT_S if next_at is None else min(IDLE_WAIT_S, max(0.0, next_at - self._clock()))
            if wait > 0:
                self.outbox.changed.wait(wait)

    def _give_up(self, delivery: Delivery) -> int:
        """Drops the delivery and those queued behind it in its lane (decided on what it said), and has the alert
        book undo what they told (`given_up`, atomically with the drop). Returns how many were behind it."""
        dropped = self._given_up(delivery) if self._given_up is not None else self.outbox.give_up(delivery)
        return max(0, len(dropped) - 1)

    def _handle(self, delivery: Delivery) -> None:
        notification = delivery.notification
        now = self._clock()
        age = now - notification.created_at
        if age > self._max_age_s:
            withdrawn = self._give_up(delivery)
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
                    "withdrawn_behind": withdrawn,
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
            self.outbox.touch(delivery)
            self._persist()
        try:
            if checks:
                new_ref = self.notifier.send(notification, ref, maybe_sent=maybe_sent)  # type: ignore[call-arg]
            else:
                new_ref = self.notifier.send(notification, ref)
        except PermanentError as e:
            withdrawn = self._give_up(delivery)
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
                    "withdrawn_behind": withdrawn,
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
        if self._delivered is not None:  # the receiver's notification log records it with the outbox (atomically)
            self._delivered(delivery, new_ref)
        else:
            self.outbox.done(delivery, new_ref)
        self._persist()

    def _schedule_retry(self, delivery: Delivery, error: Exception, now: float) -> None:
        delivery.attempts += 1
        delay = self._retry_delay(delivery.attempts)
        hint = error.retry_after_s if isinstance(error, RetryableError) else None
        if hint is not None:
            delay = max(delay, min(hint, RETRY_AFTER_MAX_S))
        if isinstance(error, RetryableError) and not error.maybe_acted:
            delivery.in_flight = False  # refused: nothing of this attempt to look for before the next
        delivery.next_attempt_at = now + delay
        delivery.last_error = _describe(error)
        self.outbox.touch(delivery)
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

    def _retry_delay(self, attempts: int) -> float:
        backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** min(attempts - 1, 30))
        # Jitter: after an outage, the retries of many deliveries do not all hit the receiver in the same second.
        return backoff * self._rng.uniform(0.5, 1.0)

    # -- supervision (on the supervisor's thread; this worker's own thread is dead) -------------------------------

    def supervise(self, now: float) -> None:
        """Notices this worker's thread dead without stop() asked, and starts a new one when its backoff is over."""
        if self.thread.is_alive():
            if self.counters.deaths_in_a_row and now - self.started_at >= RESTART_STABLE_S:
                with self.counters.lock:
                    self.counters.deaths_in_a_row = 0  # it has recovered
            return
        if self.thread.ident is None:  # never started (the dispatcher was not)
            return
        if self.restart_at is None:
            self._bury(now)
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            self.thread = self._new_thread()
            with self.counters.lock:
                self.counters.restarts += 1
            self.start()

    def _bury(self, now: float) -> None:
        cause, self.died_of = self.died_of, None
        text = _describe(cause) if cause is not None else "its thread ended, cause unknown"
        with self.counters.lock:
            deaths = self.counters.deaths_in_a_row + 1 if now - self.started_at < RESTART_STABLE_S else 1
            self.counters.deaths_in_a_row = deaths
        delay = 0.0 if deaths == 1 else min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_FIRST_S * 2.0 ** min(deaths - 2, 30))
        self.restart_at = now + delay
        wall = self._safe_now()
        self.counters.error(f"worker died: {text}", wall)
        delivery, self.current = self.current, None
        log.error(
            "notifier worker thread died; starting a new one",
            # The traceback once per streak: a worker dying again and again must not flood the log.
            exc_info=(type(cause), cause, cause.__traceback__) if cause is not None and deaths == 1 else None,
            extra={
                "notifier": self.name,
                "error": text,
                "deaths_in_a_row": deaths,
                "restart_in_s": round(delay, 1),
                "notification_id": delivery.notification.id if delivery is not None else None,
            },
        )
        with self.outbox.changed:
            pending = delivery is not None and any(d is delivery for d in self.outbox.deliveries)
            if delivery is not None and pending:
                # A failed attempt, retried with backoff: a notification that kills the worker every time blocks
                # neither its group's later ones for long nor other groups, and expires at max_age_s. `in_flight`
                # stays as it was: set if the notifier checks for duplicates, so it looks before posting again.
                delivery.attempts += 1
                delivery.next_attempt_at = wall + self._retry_delay(delivery.attempts)
                delivery.last_error = f"worker died: {text}"
                self.outbox.touch(delivery)
                with self.counters.lock:
                    self.counters.retried += 1
        if pending:
            self._persist()  # the new thread must not be the first to write what the dead one was doing

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
                restarts=c.restarts,
                keeps_dying=c.deaths_in_a_row >= KEEPS_DYING_AFTER,
                queued=self.outbox.pending(self.name),
                delivered=c.delivered,
                retried=c.retried,
                failed_permanent=c.failed_permanent,
                dropped_expired=c.dropped_expired,
                persist_failures=c.persist_failures,
                unexpected_errors=c.unexpected_errors,
                last_error=c.last_error,
                last_error_at=c.last_error_at,
                failing_every_turn=c.loop_errors_in_a_row >= FAILING_AFTER_TURNS,
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
        given_up: Callable[[Delivery], list[Notification]] | None = None,
        on_delivered: Callable[[Delivery, dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.outbox = outbox
        self.notifiers = dict(notifiers)
        self.persist = persist
        # Gives up a delivery (refused for good, or too old) with those queued behind it in its lane, and has the
        # alert book undo what they told, at once (Outbox.give_up, AlertBook.undelivered): returns their
        # notifications. Without it, they are dropped from the outbox alone.
        self.given_up = given_up
        # A delivery that succeeded: it leaves the outbox, and the notification log records what its receiver now
        # has (AlertBook.delivered), at once. Without it, it leaves the outbox alone.
        self.on_delivered = on_delivered
        self.clock = clock
        self.max_age_s = max_age_s
        self.rng = rng or random.Random()
        self.stopping = threading.Event()
        self._supervisor_wake = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise_loop, name="lagwatch-notify-supervisor", daemon=True)
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

    @property
    def supervising(self) -> bool:
        """The supervisor runs (a dead worker will be started again). False before start() and after stop()."""
        return self._supervisor.is_alive()

    def start(self) -> Dispatcher:
        self._drop_orphans()
        for worker in self._workers.values():
            worker.start()
        self._supervisor.start()
        return self

    def wake_supervisor(self) -> None:
        self._supervisor_wake.set()

    def supervise(self) -> None:
        """Restarts the worker threads that died (see the module's docstring). The supervisor calls it."""
        now = time.monotonic()
        for worker in self._workers.values():
            if self.stopping.is_set():
                return
            worker.supervise(now)

    def _supervise_loop(self) -> None:
        while not self.stopping.is_set():
            self._supervisor_wake.wait(SUPERVISE_S)
            self._supervisor_wake.clear()
            if self.stopping.is_set():
                return
            try:
                self.supervise()
            except Exception:  # a bug here must not end the supervision for good
                log.exception("notifier supervisor error; it carries on")

    def stop(self, timeout: float = 5.0) -> None:
        """Asks every worker to stop and waits up to `timeout` in all. A worker inside a slow send (Slack sleeping
        out a Retry-After) finishes it first; its thread is a daemon, so it never holds the process up."""
        self.stopping.set()
        self.wake_supervisor()
        with self.outbox.changed:
            self.outbox.changed.notify_all()
        deadline = time.monotonic() + timeout
        if self._supervisor.is_alive():  # first: it must not start a worker that stop() then misses
            self._supervisor.join(max(0.0, deadline - time.monotonic()))
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
