"""Delivers the outbox from its own thread, so a slow or failing notifier never delays a poll."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from lagwatch.notify.base import Notifier
from lagwatch.notify.outbox import Delivery, Outbox

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0  # retried forever, but at most this far apart: queued notifications are never dropped


class Dispatcher:
    def __init__(
        self,
        outbox: Outbox,
        notifiers: Mapping[str, Notifier],
        persist: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.outbox = outbox
        self.notifiers = dict(notifiers)
        self._persist = persist
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lagwatch-notify", daemon=True)
        self.delivered = 0
        self.failed_attempts = 0

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self.outbox.changed:
            self.outbox.changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            for delivery in self.outbox.due(self._clock()):
                if self._stop.is_set():
                    return
                self._attempt(delivery)
            with self.outbox.changed:
                next_at = self.outbox.next_attempt()
                wait = 1.0 if next_at is None else min(1.0, max(0.0, next_at - self._clock()))
                if not self._stop.is_set() and (next_at is None or wait > 0):
                    self.outbox.changed.wait(wait)

    def _attempt(self, delivery: Delivery) -> None:
        notifier = self.notifiers.get(delivery.notifier)
        if notifier is None:
            log.error("no such notifier; dropping its deliveries", extra={"notifier": delivery.notifier})
            self.outbox.done(delivery, None)
            self._persist()
            return
        ref = self.outbox.refs.get(Outbox.ref_key(delivery.notifier, delivery.notification.group_key))
        try:
            new_ref = notifier.send(delivery.notification, ref)
        except Exception as e:  # every failure is retried; the notifier's own words go to the log
            self.failed_attempts += 1
            delivery.attempts += 1
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (delivery.attempts - 1))
            delivery.next_attempt_at = self._clock() + delay
            delivery.last_error = f"{type(e).__name__}: {e}"[:300]
            log.warning(
                "notification not delivered, will retry",
                extra={
                    "notifier": delivery.notifier,
                    "notification_id": delivery.notification.id,
                    "attempts": delivery.attempts,
                    "retry_in_s": delay,
                    "error": delivery.last_error,
                },
            )
            self._persist()
            return
        self.delivered += 1
        self.outbox.done(delivery, new_ref)
        self._persist()
