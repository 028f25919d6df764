"""The dispatcher's workers: one per notifier, never blocked by another, never killed by a failure (of a notifier,
of persist(), of their own loop), and started again by the supervisor when their thread dies all the same;
permanent failures dropped and recorded, retryable ones retried, old ones expired. Slack and webhooks are real servers on loopback; no Kafka broker needed."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lagwatch.alerts import AlertRecord, AlertState, Notification, NotificationKind, Severity
from lagwatch.notify import Dispatcher, LogNotifier, Outbox, PermanentError, RetryableError, dispatcher
from lagwatch.notify.outbox import Delivery
from lagwatch.notify.settings import WebhookConfig
from lagwatch.notify.webhook import WebhookNotifier
from lagwatch.serve import metrics
from tests.conftest import wait_for
from tests.fake_slack import FakeSlack
from tests.test_slack import Lifecycle, finding, notifier


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatcher, "BACKOFF_FIRST_S", 0.05)
    monkeypatch.setattr(dispatcher, "BACKOFF_MAX_S", 0.2)
    monkeypatch.setattr(dispatcher, "PERSIST_RETRY_S", 0.1)


def note(group: str, number: int, kind: str = "update", created_at: float | None = None) -> Notification:
    at = time.time() if created_at is None else created_at
    return Notification(
        id=f"{group}-{number}",
        group_key=f"cluster=prod|group={group}",
        group_labels={"cluster": "prod", "group": group},
        kind=NotificationKind(kind),
        severity=Severity.WARNING,
        created_at=at,
        alerts=(
            AlertRecord(
                key=f"lag|cluster=prod|group={group}",
                rule="lag",
                severity=Severity.WARNING,
                cluster="prod",
                group=group,
                labels={"cluster": "prod", "group": group},
                summary=f"lag on {group}",
                details={},
                runbook_url=None,
                for_s=0.0,
                state=AlertState.RESOLVED if kind == "resolved" else AlertState.FIRING,
                started_at=at,
                updated_at=at,
            ),
        ),
    )


class Recorder:
    """A notifier that records what it delivers; `fail_with` maps a notification id to errors to raise, in turn."""

    def __init__(self, name: str = "rec") -> None:
        self.name = name
        self.sent: list[str] = []
        self.fail_with: dict[str, list[Exception]] = {}
        self.lock = threading.Lock()

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        with self.lock:
            errors = self.fail_with.get(notification.id)
            if errors:
                raise errors.pop(0)
            self.sent.append(notification.id)
        return None


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_a_slack_retry_after_does_not_delay_the_log_notifier(slack: FakeSlack) -> None:
    slack.rate_limit_next, slack.retry_after = 1, 5
    life = Lifecycle(("slack", "log"))
    life.step([finding("lag")], 0)
    started = time.monotonic()
    d = Dispatcher(life.outbox, {"slack": notifier(slack), "log": LogNotifier()}, persist=lambda: None).start()
    try:
        wait_for(lambda: d.health()["log"].delivered == 1, timeout=10, interval=0.02, what="the log notification")
        assert time.monotonic() - started < 1.0  # not after Slack's 5 s
        assert d.health()["slack"].delivered == 0 and life.outbox.pending("slack") == 1
        wait_for(lambda: d.health()["slack"].delivered == 1, timeout=20, interval=0.05, what="the Slack message")
        assert time.monotonic() - started >= 5.0  # Slack's Retry-After was honoured
    finally:
        d.stop()
    assert len(slack.delivered("chat.postMessage")) == 1 and life.outbox.pending() == 0


def test_invalid_auth_is_recorded_once_and_blocks_no_later_notification(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack.errors_next["chat.postMessage"] = ["invalid_auth"]
    life = Lifecycle()
    (refused,) = life.step([finding("lag", group="a")], 0)
    life.step([finding("lag", group="a"), finding("stalled", group="a"), finding("lag", group="b")], 30)
    assert [(d.notification.group_key, d.notification.kind) for d in life.outbox.deliveries] == [
        ("cluster=prod|group=a", "firing"),
        ("cluster=prod|group=a", "update"),
        ("cluster=prod|group=b", "firing"),
    ]
    d = Dispatcher(life.outbox, {"slack": notifier(slack)}, persist=lambda: None).start()
    try:
        wait_for(lambda: life.outbox.pending() == 0, timeout=20, interval=0.05, what="delivery")
        health = d.health()["slack"]
    finally:
        d.stop()
    assert (health.alive, health.delivered, health.failed_permanent, health.retried) == (True, 1, 1, 0)
    assert health.last_error is not None and "invalid_auth" in health.last_error
    (record,) = messages(caplog, "refused for good")
    assert record.notification_id == refused.id and "invalid_auth" in record.error  # type: ignore[attr-defined]
    # a's update was decided on its firing, which never arrived: it went with it (the alert book announces a
    # again after group_interval, AlertBook.undelivered); b's firing, in another lane, was not held up.
    assert record.withdrawn_behind == 1  # type: ignore[attr-defined]
    posts = sorted(c.args["text"].split(" (")[0] for c in slack.delivered("chat.postMessage"))
    assert posts == ["[FIRING] WARNING: prod / b"]
    assert [c.error for c in slack.calls if c.error] == ["invalid_auth"]  # tried once, never again


def test_a_deleted_message_is_posted_anew(slack: FakeSlack) -> None:
    life = Lifecycle()
    n = notifier(slack)
    life.step([finding("lag")], 0)
    first_run = Dispatcher(life.outbox, {"slack": n}, persist=lambda: None).start()
    wait_for(lambda: life.outbox.pending() == 0, timeout=20, interval=0.05, what="firing")
    first_run.stop()
    (first,) = life.outbox.refs.values()
    slack.errors_next["chat.update"] = ["message_not_found"]  # someone deleted it in Slack
    life.step([finding("lag"), finding("stalled", severity="critical")], 30)
    d = Dispatcher(life.outbox, {"slack": n}, persist=lambda: None).start()
    try:
        wait_for(lambda: life.outbox.pending() == 0, timeout=20, interval=0.05, what="update")
        (second,) = life.outbox.refs.values()
        life.step([], 60)
        wait_for(lambda: life.outbox.pending() == 0, timeout=20, interval=0.05, what="resolved")
        health = d.health()["slack"]
    finally:
        d.stop()
    assert second["ts"] != first["ts"] and second["channel"] == first["channel"]
    assert (health.delivered, health.failed_permanent, health.retried) == (2, 0, 0)
    calls = [(c.method, c.error, c.args.get("ts"), c.args.get("thread_ts")) for c in slack.calls]
    assert calls == [
        ("chat.postMessage", None, None, None),
        ("chat.update", "message_not_found", first["ts"], None),
        ("chat.postMessage", None, None, None),  # the update, as a new message
        ("chat.update", None, second["ts"], None),  # resolved: the new message is edited...
        ("chat.postMessage", None, None, second["ts"]),  # ...and replied to in its thread
    ]
    assert slack.calls[2].args["text"].startswith("[UPDATE] CRITICAL")


def test_persist_failing_with_enospc_three_times_loses_nothing(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    groups = ("a", "b", "c")
    expected = {g: [f"{g}-{i}" for i in range(4)] for g in groups}
    for i in range(4):
        outbox.add([note(g, i, "firing" if i == 0 else "update") for g in groups], ["rec"])
    saves: list[dict[str, Any]] = []
    failures = [3]

    def persist() -> None:
        if failures[0] > 0:
            failures[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        saves.append(json.loads(json.dumps(outbox.to_json())))

    rec = Recorder()
    d = Dispatcher(outbox, {"rec": rec}, persist=persist).start()
    try:
        wait_for(lambda: len(rec.sent) == 12 and saves and not saves[-1]["deliveries"], timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert sorted(rec.sent) == sorted(i for ids in expected.values() for i in ids)  # each exactly once
    for g in groups:
        assert [i for i in rec.sent if i.startswith(g)] == expected[g]  # in order, per group
    assert health.alive and health.delivered == 12 and health.persist_failures == 3
    (logged,) = messages(caplog, "saving the alert state failed")  # once for the streak, with its traceback
    assert logged.exc_info is not None and isinstance(logged.exc_info[1], OSError)
    assert logged.exc_info[1].errno == errno.ENOSPC
    assert len(messages(caplog, "saved again")) == 1


def test_a_disk_that_never_recovers_still_delivers_from_memory() -> None:
    outbox = Outbox()
    outbox.add([note("a", i) for i in range(3)], ["rec"])

    def persist() -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    rec = Recorder()
    d = Dispatcher(outbox, {"rec": rec}, persist=persist).start()
    try:
        wait_for(lambda: len(rec.sent) == 3, timeout=10, what="delivery")
        wait_for(lambda: d.health()["rec"].persist_failures >= 5, timeout=10, what="saves retried")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert rec.sent == ["a-0", "a-1", "a-2"] and health.alive and outbox.pending() == 0


def test_retryable_errors_are_retried_in_order_and_permanent_ones_dropped(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    outbox.add([note("a", 0), note("b", 0)], ["rec"])
    outbox.add([note("a", 1), note("b", 1)], ["rec"])
    rec = Recorder()
    rec.fail_with = {
        "a-0": [RetryableError("down"), RetryableError("still down")],
        "b-0": [PermanentError("channel_not_found")],
    }
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None).start()
    try:
        wait_for(lambda: outbox.pending() == 0, timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert [i for i in rec.sent if i.startswith("a")] == ["a-0", "a-1"]  # a-1 waited for a-0's retries
    # b-1 was decided on what b-0 said, and b-0 was refused for good: b-1 went with it (AlertBook.undelivered
    # decides b's news again), and a's lane was never held up by b's.
    assert [i for i in rec.sent if i.startswith("b")] == []
    assert (health.delivered, health.retried, health.failed_permanent) == (2, 2, 1)
    assert d.delivered == 2 and d.failed_attempts == 3
    assert len(messages(caplog, "will retry")) == 2
    (refused,) = messages(caplog, "refused for good")
    assert refused.withdrawn_behind == 1  # type: ignore[attr-defined]


def test_an_unexpected_exception_is_retried_and_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    outbox.add([note("a", 0)], ["rec"])
    rec = Recorder()
    rec.fail_with = {"a-0": [KeyError("blocks")]}
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None).start()
    try:
        wait_for(lambda: rec.sent == ["a-0"], timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert health.alive and health.unexpected_errors == 1 and health.retried == 1
    (logged,) = messages(caplog, "will retry")
    assert logged.exc_info is not None and isinstance(logged.exc_info[1], KeyError)


def test_an_error_in_the_worker_loop_does_not_kill_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    outbox.add([note("a", 0)], ["rec"])
    broken = [2]

    def clock() -> float:
        if broken[0] > 0:  # e.g. a bug, or anything the loop did not expect
            broken[0] -= 1
            raise RuntimeError("clock broke")
        return time.time()

    rec = Recorder()
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None, clock=clock).start()
    try:
        wait_for(lambda: rec.sent == ["a-0"], timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert health.alive and health.unexpected_errors >= 1 and health.delivered == 1
    assert health.last_error == "RuntimeError: clock broke"
    logged = messages(caplog, "worker error")
    assert logged and logged[0].exc_info is not None
    assert not d.health()["rec"].alive  # stop() ends it


def test_notifications_older_than_max_age_are_dropped_with_a_record(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    now = time.time()
    # a-1 was decided behind a-0 (on what a-0 said): it goes with it; b's lane is not held up.
    outbox.add([note("a", 0, created_at=now - 7200), note("b", 0, created_at=now - 10)], ["rec"])
    outbox.add([note("a", 1, created_at=now - 10)], ["rec"])
    rec = Recorder()
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None, max_age_s=3600).start()
    try:
        wait_for(lambda: outbox.pending() == 0, timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert rec.sent == ["b-0"] and health.dropped_expired == 1 and health.delivered == 1
    (logged,) = messages(caplog, "older than notifiers.max_age_s")
    assert logged.notification_id == "a-0" and logged.withdrawn_behind == 1  # type: ignore[attr-defined]


def test_deliveries_of_a_notifier_no_longer_configured_are_dropped_at_start() -> None:
    outbox = Outbox()
    outbox.add([note("a", 0)], ["gone", "rec"])
    saved: list[int] = []
    rec = Recorder()
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: saved.append(outbox.pending())).start()
    try:
        wait_for(lambda: outbox.pending() == 0, timeout=10, what="delivery")
    finally:
        d.stop()
    assert rec.sent == ["a-0"] and saved[0] == 1  # the orphan went first, and that was saved


# -- webhooks ------------------------------------------------------------------------------------------------------


class StatusReceiver:
    """Answers each notification id with the statuses queued for it, in turn, then 200."""

    def __init__(self) -> None:
        self.statuses: dict[str, list[int]] = {}
        self.headers: dict[int, dict[str, str]] = {}
        self.seen: list[tuple[str, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                queued = receiver.statuses.get(body["id"])
                status = queued.pop(0) if queued else 200
                receiver.seen.append((body["id"], status))
                self.send_response(status)
                for k, v in receiver.headers.get(status, {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[StatusReceiver]:
    r = StatusReceiver()
    yield r
    r.stop()


def test_webhook_400_is_permanent_and_503_is_retried(receiver: StatusReceiver) -> None:
    outbox = Outbox()
    outbox.add([note("a", 0), note("b", 0)], ["webhook:ops"])
    outbox.add([note("b", 1)], ["webhook:ops"])
    receiver.statuses = {"a-0": [503], "b-0": [400]}
    hook = WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url, timeout_s=2))
    d = Dispatcher(outbox, {"webhook:ops": hook}, persist=lambda: None).start()
    try:
        wait_for(lambda: outbox.pending() == 0, timeout=10, what="delivery")
        health = d.health()["webhook:ops"]
    finally:
        d.stop()
    # b-1, decided behind b-0, went with it when b-0 was refused for good (400)
    assert sorted(receiver.seen) == [("a-0", 200), ("a-0", 503), ("b-0", 400)]
    assert (health.delivered, health.retried, health.failed_permanent) == (1, 1, 1)
    assert health.last_error is not None and "HTTP" in health.last_error


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, PermanentError),
        (401, PermanentError),
        (404, PermanentError),
        (410, PermanentError),
        (408, RetryableError),
        (429, RetryableError),
        (500, RetryableError),
        (503, RetryableError),
    ],
)
def test_webhook_http_statuses_are_classified(receiver: StatusReceiver, status: int, kind: type[Exception]) -> None:
    receiver.statuses = {"a-0": [status]}
    with pytest.raises(kind, match=f"HTTP {status}"):
        WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url)).send(note("a", 0), None)


def test_webhook_retry_after_and_connection_errors(receiver: StatusReceiver) -> None:
    receiver.statuses = {"a-0": [429]}
    receiver.headers = {429: {"Retry-After": "7"}}
    with pytest.raises(RetryableError) as e:
        WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url)).send(note("a", 0), None)
    assert e.value.retry_after_s == 7.0
    receiver.stop()
    with pytest.raises(RetryableError):
        WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url, timeout_s=2)).send(note("a", 0), None)


def test_retry_after_sets_the_next_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatcher, "BACKOFF_MAX_S", 300.0)
    outbox = Outbox()
    outbox.add([note("a", 0)], ["rec"])
    rec = Recorder()
    rec.fail_with = {"a-0": [RetryableError("slow down", retry_after_s=60)]}
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None).start()
    try:
        wait_for(lambda: d.health()["rec"].retried == 1, timeout=10, what="first attempt")
        (delivery,) = outbox.deliveries
        assert 59 <= delivery.next_attempt_at - time.time() <= 60.5 and rec.sent == []
    finally:
        d.stop()


class WorkerKiller(BaseException):
    """Not an Exception: the worker's loop does not catch it, so its thread dies (a bug of that kind)."""


class DiesAfterPosting:
    """The real Slack notifier, whose thread dies right after its first post reached Slack (before the dispatcher
    hears of it): the outcome of the attempt is unknown to lagwatch."""

    checks_duplicates = True

    def __init__(self, inner: Any) -> None:
        self.name = "slack"
        self.inner = inner
        self.calls: list[bool] = []  # maybe_sent, per call

    def send(self, n: Notification, ref: dict[str, Any] | None, maybe_sent: bool = False) -> dict[str, Any] | None:
        self.calls.append(maybe_sent)
        result = self.inner.send(n, ref, maybe_sent=maybe_sent)
        if len(self.calls) == 1:
            raise WorkerKiller("killed after the post")
        return result  # type: ignore[no-any-return]


def test_a_worker_killed_in_a_send_is_restarted_and_the_message_is_posted_once(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    life = Lifecycle()
    (firing,) = life.step([finding("lag")], 0)
    saved_in_flight: list[bool] = []
    wrapped = DiesAfterPosting(notifier(slack))
    d = Dispatcher(
        life.outbox,
        {"slack": wrapped},
        persist=lambda: saved_in_flight.append(any(x.in_flight for x in life.outbox.deliveries)),
    ).start()
    try:
        wait_for(lambda: life.outbox.pending() == 0, timeout=20, interval=0.05, what="the delivery")
        health = d.health()["slack"]
        own = metrics.render_self_monitoring(d.health(), True, {}, None, {}).decode()
    finally:
        d.stop()
    assert wrapped.calls == [False, True]  # the second attempt knew the first one's outcome was unknown
    assert saved_in_flight[0] is True  # saved as in flight before the first call
    assert len(slack.delivered("chat.postMessage")) == 1  # looked up, found: not posted again
    assert [c.method for c in slack.calls] == ["chat.postMessage", "conversations.history"]
    assert (health.alive, health.restarts, health.keeps_dying, health.delivered) == (True, 1, False, 1)
    assert 'lagwatch_notifier_worker_restarts_total{notifier="slack"} 1' in own
    (died,) = messages(caplog, "worker thread died")
    assert died.exc_info is not None and isinstance(died.exc_info[1], WorkerKiller)
    assert died.error == "WorkerKiller: killed after the post"  # type: ignore[attr-defined]
    assert died.notification_id == firing.id  # type: ignore[attr-defined]


def test_a_base_exception_once_restarts_the_worker_and_the_notification_arrives_once() -> None:
    outbox = Outbox()
    outbox.add([note("a", 0), note("a", 1), note("b", 0)], ["rec"])
    rec = Recorder()
    rec.fail_with = {"a-0": [WorkerKiller("once")]}  # type: ignore[list-item]
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None).start()
    try:
        wait_for(lambda: outbox.pending() == 0, timeout=10, what="delivery")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert sorted(rec.sent) == ["a-0", "a-1", "b-0"] and rec.sent.index("a-0") < rec.sent.index("a-1")
    assert (health.restarts, health.retried, health.delivered) == (1, 1, 3)
    assert not d.supervising  # stop() ends the supervisor too


def test_a_worker_that_dies_every_time_is_restarted_with_backoff_and_recovers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(dispatcher, "RESTART_BACKOFF_FIRST_S", 0.2)
    monkeypatch.setattr(dispatcher, "RESTART_STABLE_S", 1.0)
    outbox = Outbox()
    outbox.add([note("a", 0), note("b", 0), note("b", 1)], ["rec"])
    attempts: list[float] = []
    poisoned = [True]

    class Poisoned(Recorder):
        def send(self, n: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
            if n.id == "a-0":
                attempts.append(time.monotonic())
                if poisoned[0]:
                    raise WorkerKiller("a-0 kills it")
            return super().send(n, ref)

    rec = Poisoned()
    d = Dispatcher(outbox, {"rec": rec}, persist=lambda: None).start()
    try:
        wait_for(lambda: len(attempts) >= 5, timeout=10, what="five deaths")
        health = d.health()["rec"]
        assert health.keeps_dying and health.restarts >= 4
        assert rec.sent == ["b-0", "b-1"]  # the killing delivery blocks no other group
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        # Restarts after 0, 0.2, 0.4, 0.8 s: each wait about twice the one before, never a hot loop.
        assert gaps[1] >= 0.18 and gaps[2] >= 0.38 and gaps[3] >= 0.78, gaps
        poisoned[0] = False  # whatever killed it is gone
        wait_for(lambda: rec.sent == ["b-0", "b-1", "a-0"], timeout=10, what="the delivery")
        wait_for(lambda: not d.health()["rec"].keeps_dying, timeout=5, what="recovered: alive RESTART_STABLE_S")
        health = d.health()["rec"]
    finally:
        d.stop()
    assert health.alive and health.delivered == 3 and health.restarts == len(attempts) - 1
    died = messages(caplog, "worker thread died")
    assert len(died) == health.restarts  # one line per death...
    assert [r.exc_info is not None for r in died] == [True] + [False] * (len(died) - 1)  # ...one traceback


class _Flaky:
    """Down (retryable) until `up_at`, then refuses for good the first notification it is sent (refuse_first),
    or the first of a kind (refuse_kind); records what it got."""

    name = "hook"

    def __init__(
        self, refuse_first: bool = False, up_at: float = 0.0, refuse_kind: str | None = None, down_at: float = 0.0
    ) -> None:
        self.got: list[str] = []
        self.refuse_next, self.refuse_kind = refuse_first, refuse_kind
        self.down_at, self.up_at = down_at, up_at  # down from down_at until up_at
        self.now = [0.0]

    def send(self, n: Notification, ref: object) -> None:
        if self.down_at <= self.now[0] < self.up_at:
            raise RetryableError("connection refused")
        if self.refuse_next or n.kind == self.refuse_kind:
            self.refuse_next, self.refuse_kind = False, None
            raise PermanentError("HTTP 400")
        self.got.append(n.kind)


def _drive(receiver: _Flaky, polls: list[tuple[float, bool]], max_age_s: float = 3600) -> None:
    """The alert book and a notifier's worker, poll after poll: the lag alert fires where a poll says True."""
    from lagwatch.alerts import AlertBook, AlertsConfig, Receiver
    from lagwatch.model import Finding

    book = AlertBook(
        AlertsConfig.model_validate({"group_wait_s": 0, "group_interval_s": 300, "repeat_interval_s": 4 * 3600}),
        receivers=(Receiver("hook"),),
    )
    outbox, now = Outbox(), receiver.now

    def give_up(delivery: Delivery) -> list[Notification]:  # as the daemon does, under its book's lock
        dropped = outbox.give_up(delivery)
        book.undelivered(dropped)
        return dropped

    def delivered(delivery: Delivery, ref: dict[str, Any] | None) -> None:  # as the daemon does
        outbox.done(delivery, ref)
        book.delivered(delivery.notification)

    d = Dispatcher(
        outbox,
        {"hook": receiver},
        lambda: None,
        clock=lambda: now[0],
        max_age_s=max_age_s,
        given_up=give_up,
        on_delivered=delivered,
    )
    worker = d._workers["hook"]
    lag = Finding("lag", "warning", "c", "g", {"cluster": "c", "group": "g", "topic": "t"}, "g lags", {"lag": 1})
    for t, firing in polls:
        now[0] = t
        book.apply("c", [lag] if firing else [], frozenset(), t)
        for n in book.due(t):
            outbox.add([n], [n.receiver])
        for delivery in outbox.due(t, "hook"):
            worker._handle(delivery)


def test_a_firing_refused_for_good_is_not_followed_by_a_resolve_and_is_announced_again() -> None:
    """The receiver refused the firing (a transient misconfiguration, HTTP 400): it never had the alert, so it
    gets no resolve for it; while the alert still fires, it is announced again after group_interval."""
    receiver = _Flaky(refuse_first=True)
    _drive(receiver, [(0, True), (100, True), (200, True), (400, True), (500, True), (3100, False)])
    assert receiver.got == ["firing", "resolved"]  # the firing again at 400, group_interval after the refusal
    refused = _Flaky(refuse_first=True)
    _drive(refused, [(0, True), (100, False), (500, False)])
    assert refused.got == []  # never had it: no resolve


def test_a_resolve_queued_behind_a_firing_refused_for_good_goes_with_it() -> None:
    """The receiver was down while the alert fired and resolved: its firing and, behind it, its resolve were
    queued. Back, it refused the firing for good (HTTP 400 once): it never had the alert, and the resolve queued
    behind was delivered all the same, a "resolved" for an alert it never saw (Slack posted a new message with only
    RESOLVED in it). The resolve goes with the firing it was decided on."""
    receiver = _Flaky(refuse_first=True, up_at=1000)
    _drive(receiver, [(0, True), (400, False), *((float(t), False) for t in range(1000, 2000, 100))])
    assert receiver.got == []


def test_a_resolve_queued_behind_a_firing_too_old_goes_with_it() -> None:
    """The same with the firing dropped as older than max_age_s (an outage longer than it)."""
    receiver = _Flaky(up_at=4000)
    _drive(receiver, [(0, True), (400, False), *((float(t), False) for t in range(4000, 4600, 60))], max_age_s=3600)
    assert receiver.got == []


def test_a_resolve_dropped_as_too_old_is_sent_again_once_the_receiver_is_back() -> None:
    """The firing was delivered, then the receiver was down longer than max_age_s while the alert resolved: the
    resolve was dropped as too old, and the receiver's message stayed firing for good. It is owed again, and sent
    once the receiver is back."""
    receiver = _Flaky(down_at=150, up_at=5000)
    _drive(receiver, [(0, True), (100, True), *((float(t), False) for t in range(200, 5600, 100))], max_age_s=3600)
    assert receiver.got == ["firing", "resolved"]


def test_a_resolve_refused_for_good_is_sent_again_after_group_interval() -> None:
    """A resolve refused for good once (a token revoked, then put right): the receiver still has the alert
    firing, so the resolve is owed again, and sent once group_interval is over."""
    receiver = _Flaky(refuse_kind="resolved")
    _drive(receiver, [(0, True), (100, True), (200, False), (300, False), (520, False), (600, False)])
    assert receiver.got == ["firing", "resolved"]


def test_a_firing_dropped_as_too_old_is_announced_once_the_receiver_is_back() -> None:
    """The receiver was down longer than max_age_s: the firing was dropped undelivered. The alert fired all
    along; once the receiver is back it is told within group_interval, not hours later at the repeat interval."""
    receiver = _Flaky(up_at=4000)
    _drive(receiver, [(float(t), True) for t in range(0, 4600, 60)], max_age_s=3600)
    assert receiver.got == ["firing"]


def test_a_worker_whose_loop_fails_at_every_turn_is_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alive, but every turn of its loop ends in the same bug (a queued row it cannot read): it delivers nothing,
    and /readyz said nothing. After three failed turns in a row it is reported; one good turn clears it."""
    from lagwatch.serve.health import worker_problems

    monkeypatch.setattr(dispatcher, "LOOP_ERROR_PAUSE_S", 0.05)
    outbox = Outbox()
    broken = [True]
    real_due = outbox.due

    def due(now: float, notifier: str) -> list[Any]:
        if broken[0]:
            raise TypeError("'NoneType' object is not subscriptable")
        return real_due(now, notifier)

    monkeypatch.setattr(outbox, "due", due)
    d = Dispatcher(outbox, {"rec": Recorder()}, persist=lambda: None).start()
    try:
        wait_for(lambda: d.health()["rec"].failing_every_turn, timeout=5, what="three failed turns")
        (problem,) = worker_problems(d.health())
        assert "fails at every turn" in problem and "NoneType" in problem and d.health()["rec"].alive
        broken[0] = False
        wait_for(lambda: not d.health()["rec"].failing_every_turn, timeout=5, what="a good turn")
        assert worker_problems(d.health()) == []
    finally:
        d.stop()
