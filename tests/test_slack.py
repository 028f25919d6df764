"""Slack delivery against a Slack-Web-API-compatible server on loopback: threads, updates, 429, 500, outages,
restarts, pacing and routing. The notifications come from the real alert lifecycle."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagwatch.alerts import AlertBook, AlertsConfig, Notification
from lagwatch.model import Finding
from lagwatch.notify import Dispatcher, Outbox, PermanentError, RetryableError, dispatcher
from lagwatch.notify.settings import SlackConfig
from lagwatch.notify.slack import SlackNotifier
from tests.conftest import wait_for
from tests.fake_slack import FakeSlack, _channel_id


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def notifier(fake: FakeSlack, **extra: object) -> SlackNotifier:
    cfg = SlackConfig.model_validate(
        {"token": fake.token, "base_url": fake.base_url, "default_channel": "#kafka", **extra}
    )
    return SlackNotifier("slack", cfg)


def finding(rule: str, group: str = "payments", severity: str = "warning", **labels: str) -> Finding:
    return Finding(
        rule,
        severity,
        "prod",
        group,
        {"cluster": "prod", "group": group, **labels},
        f"{rule} on {group}",
        {"lag": 1234, "lag_seconds": 95.0, "eta_s": None, "falling_behind": True},
    )


class Lifecycle:
    """The real alert book, stepping through time from now (so that notifications are not older than the
    dispatcher's maximum age); what it decides goes to an outbox, for `notifiers`."""

    def __init__(self, notifiers: tuple[str, ...] = ("slack",)) -> None:
        self.book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0))
        self.outbox = Outbox()
        self.notifiers = list(notifiers)
        self.start = time.time()

    def step(self, findings: list[Finding], after_s: float) -> list[Notification]:
        now = self.start + after_s
        self.book.apply("prod", findings, frozenset(), now)
        notes = self.book.due(now)
        self.outbox.add(notes, self.notifiers)
        return notes


def deliver(outbox: Outbox, n: SlackNotifier, timeout: float = 20) -> Dispatcher:
    d = Dispatcher(outbox, {"slack": n}, persist=lambda: None).start()
    wait_for(lambda: outbox.pending() == 0, timeout=timeout, interval=0.05, what="delivery")
    d.stop()
    return d


def test_firing_then_update_in_place_then_resolved_in_thread(slack: FakeSlack) -> None:
    life = Lifecycle()
    n = notifier(slack)
    assert [x.kind for x in life.step([finding("lag")], 0)] == ["firing"]
    deliver(life.outbox, n)
    assert [x.kind for x in life.step([finding("lag"), finding("stalled", severity="critical")], 30)] == ["update"]
    deliver(life.outbox, n)
    assert [x.kind for x in life.step([], 60)] == ["resolved"]
    deliver(life.outbox, n)
    calls = [(c.method, c.args.get("channel"), c.args.get("ts"), c.args.get("thread_ts")) for c in slack.delivered()]
    first = slack.delivered("chat.postMessage")[0]
    channel_id, ts = _channel_id("#kafka"), "1700000000.000001"
    assert calls == [
        ("chat.postMessage", "#kafka", None, None),
        ("chat.update", channel_id, ts, None),
        ("chat.update", channel_id, ts, None),
        ("chat.postMessage", channel_id, None, ts),
    ]
    assert first.args["text"].startswith("[FIRING] WARNING: prod / payments (lag)")
    assert len(first.args["blocks"]) <= 50 and first.args["blocks"][0]["type"] == "header"
    section = json.dumps(first.args["blocks"])
    assert "1,234 records" in section and "1m" in section and "never (falling behind)" in section
    update = slack.delivered("chat.update")[0]
    assert update.args["text"].startswith("[UPDATE] CRITICAL") and "stalled" in json.dumps(update.args["blocks"])
    assert slack.delivered("chat.postMessage")[1].args["text"].startswith(":white_check_mark: Resolved")


def test_rate_limit_honours_retry_after_and_sends_once(slack: FakeSlack) -> None:
    slack.rate_limit_next, slack.retry_after = 1, 1
    life = Lifecycle()
    life.step([finding("lag")], 0)
    deliver(life.outbox, notifier(slack))
    limited, ok = slack.calls
    assert (limited.status, ok.status) == (429, 200)
    assert ok.at - limited.at >= 1.0  # waited for Retry-After
    assert len(slack.delivered("chat.postMessage")) == 1


def test_server_error_is_retried_and_sent_once(slack: FakeSlack) -> None:
    slack.fail_next = 1
    life = Lifecycle()
    life.step([finding("lag")], 0)
    deliver(life.outbox, notifier(slack))
    # The 500 may have come after Slack acted: it is looked for before it is posted again, and posted once.
    assert [(c.method, c.status) for c in slack.calls] == [
        ("chat.postMessage", 500),
        ("conversations.list", 200),
        ("conversations.history", 200),
        ("chat.postMessage", 200),
    ]
    assert len(slack.delivered()) == 1


def test_outage_then_recovery_across_a_restart_delivers_everything_once_in_order(
    slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatcher, "BACKOFF_FIRST_S", 0.2)
    monkeypatch.setattr(dispatcher, "BACKOFF_MAX_S", 0.5)
    port = slack.port
    slack.stop()  # Slack unreachable
    life = Lifecycle()
    life.step([finding("lag", group="a"), finding("lag", group="b")], 0)
    life.step([finding("lag", group="a"), finding("stalled", group="a"), finding("lag", group="b")], 30)
    life.step([finding("lag", group="b")], 60)  # a resolves
    assert [(d.notification.group_key, d.notification.kind) for d in life.outbox.deliveries] == [
        ("cluster=prod|group=a", "firing"),
        ("cluster=prod|group=b", "firing"),
        ("cluster=prod|group=a", "update"),
        ("cluster=prod|group=a", "resolved"),
    ]
    saved: list[str] = []
    first = Dispatcher(
        life.outbox, {"slack": notifier(slack)}, persist=lambda: saved.append(json.dumps(life.outbox.to_json()))
    ).start()
    wait_for(lambda: first.failed_attempts >= 3, timeout=20, what="failed attempts while Slack is down")
    first.stop()
    assert life.outbox.pending() == 4
    # lagwatch restarts: the outbox comes back from what was persisted; Slack comes back on the same address.
    restored = Outbox.from_json(json.loads(saved[-1]))
    recovered = FakeSlack(port=port).start()
    try:
        deliver(restored, notifier(recovered))
        posts = [(c.method, c.args.get("thread_ts"), c.args["text"].split(":")[0]) for c in recovered.delivered()]
        assert [p for p in posts if p[0] == "chat.postMessage" and p[1] is None] == [
            ("chat.postMessage", None, "[FIRING] WARNING"),
            ("chat.postMessage", None, "[FIRING] WARNING"),
        ]
        assert len(recovered.delivered("chat.update")) == 2  # a: update, then resolved
        assert len([c for c in recovered.delivered("chat.postMessage") if c.args.get("thread_ts")]) == 1
        a_calls = [
            c.method
            for c in recovered.delivered()
            if "group a" in json.dumps(c.args) or "/ a" in c.args.get("text", "")
        ]
        assert a_calls[0] == "chat.postMessage"  # the firing message before its update
        assert restored.refs and all("ts" in r for r in restored.refs.values())
    finally:
        recovered.stop()


def test_pacing_about_one_message_per_second_per_channel(slack: FakeSlack) -> None:
    life = Lifecycle()
    life.step([finding("lag", group=g) for g in ("a", "b", "c")], 0)
    deliver(life.outbox, notifier(slack))
    times = [c.at for c in slack.delivered("chat.postMessage")]
    assert len(times) == 3 and all(b - a >= 0.95 for a, b in itertools.pairwise(times))


def test_channel_routing_by_labels_and_rule(slack: FakeSlack) -> None:
    n = notifier(slack, rule_channels={"expiry": "#platform"}, channels_by_label={"team": {"payments": "#pay"}})

    def channel(f: Finding) -> str:
        life = Lifecycle()
        (note,) = life.step([f], 0)
        return n.channel_for(note)

    assert channel(finding("lag", slack_channel="#explicit", team="payments")) == "#explicit"
    assert channel(finding("expiry", team="payments")) == "#platform"
    assert channel(finding("lag", team="payments")) == "#pay"
    assert channel(finding("lag")) == "#kafka"


def test_block_kit_limits_with_many_long_alerts(slack: FakeSlack) -> None:
    from lagwatch.notify import render

    life = Lifecycle()
    long = [
        Finding("lag", "warning", "prod", "g", {"cluster": "prod", "group": "g", "topic": f"t{i}"}, "x" * 5000)
        for i in range(60)
    ]
    (note,) = life.step(long, 0)
    blocks = render.blocks(note, "https://grafana.example/d/lagwatch?var-group={group}")
    assert len(blocks) <= 50
    assert all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks)
    assert all(len(b.get("fields", [])) <= 10 for b in blocks)
    assert any(b["type"] == "actions" and b["elements"][0]["url"].endswith("var-group=g") for b in blocks)
    assert len(render.fallback_text(note)) <= 3000


def test_bad_token_fails_for_good_without_showing_it(slack: FakeSlack) -> None:
    n = notifier(slack)
    n.client.token = "xoxb-wrong-Secret-9"
    life = Lifecycle()
    (note,) = life.step([finding("lag")], 0)
    with pytest.raises(PermanentError) as e:
        n.send(note, None)
    assert str(e.value) == "slack chat_postMessage: invalid_auth" and "Secret" not in str(e.value)


def test_a_post_that_times_out_after_slack_acted_is_never_posted_twice(slack: FakeSlack) -> None:
    """Slack posts the message, but its answer comes after lagwatch's timeout: the retry finds the message by its
    metadata key, and the later resolve edits that very message."""
    life = Lifecycle()
    n = notifier(slack, timeout_s=1)
    slack.act_then_hang_next, slack.hang_s = 1, 2.5
    life.step([finding("lag")], 0)
    deliver(life.outbox, n, timeout=30)
    assert len(slack.delivered("chat.postMessage")) == 1
    assert [c.method for c in slack.calls].count("conversations.history") == 1
    life.step([], 60)
    deliver(life.outbox, n)
    (_post, reply) = slack.delivered("chat.postMessage")
    (update,) = slack.delivered("chat.update")
    assert update.args["ts"] == reply.args["thread_ts"] == "1700000000.000001"


def test_dying_mid_post_then_restarting_does_not_post_again(slack: FakeSlack) -> None:
    """The previous run saved the delivery as in flight, posted, and died before recording it."""
    life = Lifecycle()
    (note,) = life.step([finding("lag")], 0)
    notifier(slack).send(note, None)  # what the previous run got done before it died
    saved = json.loads(json.dumps(life.outbox.to_json()))
    saved["deliveries"][0]["in_flight"] = True
    restored = Outbox.from_json(saved)
    deliver(restored, notifier(slack))
    assert len(slack.delivered("chat.postMessage")) == 1
    assert restored.refs["slack|" + note.group_key]["ts"] == "1700000000.000001"


def test_stale_repeats_collapse_after_an_outage() -> None:
    life = Lifecycle()
    life.book.config = AlertsConfig(group_wait_s=0, group_interval_s=0, repeat_interval_s=100)
    life.step([finding("lag")], 0)
    for t in (100, 200, 300):
        life.step([finding("lag")], t)  # repeats while Slack is down
    life.step([finding("lag", severity="critical")], 350)  # an update
    life.step([finding("lag", severity="critical")], 450)  # and the latest repeat
    kinds = [d.notification.kind for d in life.outbox.deliveries]
    assert kinds == ["firing", "repeat", "repeat", "repeat", "update", "repeat"]
    later = time.time() + 1000
    for expected in ("firing", "update", "repeat"):
        (head,) = life.outbox.due(later, "slack")
        assert head.notification.kind == expected
        life.outbox.done(head, {"channel": "C1", "ts": "1"})
    assert life.outbox.collapsed == 3 and life.outbox.pending() == 0  # the three repeats before the update


def test_a_post_found_behind_hundreds_of_later_messages_is_not_posted_again(slack: FakeSlack) -> None:
    """A busy channel: after lagwatch's post timed out (Slack had posted it), 450 other messages came before the
    retry looked. Slack answers newest first, 200 a page: the post is on the third page, and was posted twice."""
    life = Lifecycle()
    n = notifier(slack, timeout_s=1)
    slack.act_then_hang_next, slack.hang_s = 1, 2.5
    (note,) = life.step([finding("lag")], 0)
    with pytest.raises(RetryableError):
        n.send(note, None)  # Slack posted it; the answer came too late
    for i in range(450):
        slack.messages.setdefault(next(iter(slack.messages)), []).append(
            {"ts": f"1700000001.{i:06d}", "at": time.time(), "text": "chatter", "metadata": None}
        )
    ref = n.send(note, None, maybe_sent=True)
    assert len(slack.delivered("chat.postMessage")) == 1
    assert ref is not None and ref["ts"] == "1700000000.000001"
    assert [c.method for c in slack.calls].count("conversations.history") == 3


def test_a_reply_that_times_out_after_slack_acted_is_never_posted_twice(slack: FakeSlack) -> None:
    """A thread reply (the resolve's) whose answer came too late: conversations.history lists no replies, so the
    lookup never found it, and the reply was posted twice. It is looked for in its thread."""
    life = Lifecycle()
    n = notifier(slack, timeout_s=1)
    life.step([finding("lag")], 0)
    deliver(life.outbox, n)
    life.step([], 60)
    slack.act_then_hang_next, slack.hang_s = 1, 3.5  # the reply (the update before it is not a post)
    deliver(life.outbox, n, timeout=30)
    replies = [c for c in slack.delivered("chat.postMessage") if c.args.get("thread_ts")]
    assert len(replies) == 1
    assert [c.method for c in slack.calls].count("conversations.replies") == 1


def test_a_post_whose_lookup_fails_for_a_while_is_not_posted_again(slack: FakeSlack) -> None:
    """After a post timed out (Slack had posted it), Slack answered the lookups 500 for a while: each failed
    lookup was taken for "not there", and the message was posted again. A lookup that fails is tried again."""
    life = Lifecycle()
    n = notifier(slack, timeout_s=1)
    slack.act_then_hang_next, slack.hang_s = 1, 3.5
    (note,) = life.step([finding("lag")], 0)
    with pytest.raises(RetryableError):
        n.send(note, None)
    slack.fail_next = 3  # the next three calls: the lookups
    for _ in range(3):
        with pytest.raises(RetryableError, match="HTTP 500"):
            n.send(note, None, maybe_sent=True)
    ref = n.send(note, None, maybe_sent=True)
    assert len(slack.delivered("chat.postMessage")) == 1 and ref is not None and ref["ts"] == "1700000000.000001"


def test_a_post_slack_carried_out_and_answered_500_is_not_posted_again(slack: FakeSlack) -> None:
    """Slack posted, then answered 500: slack-sdk's own retry posted it again at once. lagwatch retries, and looks
    for it first."""
    life = Lifecycle()
    slack.act_then_fail_next = 1
    life.step([finding("lag")], 0)
    deliver(life.outbox, notifier(slack))
    (channel,) = slack.messages.values()
    assert len(channel) == 1  # one message in Slack
    assert [c.method for c in slack.calls].count("conversations.history") == 1  # found it, and posted no more


def test_a_retry_after_of_a_day_holds_neither_the_worker_nor_the_other_groups(slack: FakeSlack) -> None:
    """One 429 with Retry-After 100000: slack-sdk slept it out in the worker (every channel frozen, /readyz green).
    The refused notification waits at most RETRY_AFTER_MAX_S; the other group's is posted at once."""
    life = Lifecycle()
    slack.rate_limit_next, slack.retry_after = 1, 100000
    life.step([finding("lag", group="a")], 0)
    life.step([finding("lag", group="a"), finding("lag", group="b")], 1)
    d = Dispatcher(life.outbox, {"slack": notifier(slack)}, persist=lambda: None).start()
    try:
        wait_for(lambda: len(slack.delivered("chat.postMessage")) == 1, timeout=10, what="b's firing")
        # Slack answered b; its delivery leaves the outbox once the worker has read the answer (a race under load)
        wait_for(lambda: len(life.outbox.deliveries) == 1, timeout=10, what="b's delivery recorded")
        (waiting,) = life.outbox.deliveries
        assert waiting.notification.group_labels["group"] == "a"
        assert waiting.next_attempt_at - time.time() <= dispatcher.RETRY_AFTER_MAX_S
    finally:
        d.stop()


def test_an_answer_that_trickles_in_is_given_up_on_in_bounded_time(slack: FakeSlack) -> None:
    """Slack (or a proxy) answering a byte a second: each read is within the timeout, and the worker waited for
    good. The whole call has a deadline: a retryable failure (it may have reached Slack) in about twice the
    timeout, and the notifier goes on."""
    life = Lifecycle()
    n = notifier(slack, timeout_s=1)
    (note,) = life.step([finding("lag")], 0)
    slack.trickle_next, slack.trickle_s = 1, 0.4  # each read well within the 1 s timeout
    started = time.monotonic()
    with pytest.raises(RetryableError, match="no full answer within 3 s"):
        n.send(note, None)
    assert time.monotonic() - started < 4
    ref = n.send(note, None)  # looked for first (it reached Slack), then not posted again
    assert ref is not None and len(slack.delivered("chat.postMessage")) == 1


@pytest.mark.parametrize("stop", ["killed", "clean"])
def test_a_notification_delivered_after_the_last_save_of_a_killed_run_is_not_posted_again(
    slack: FakeSlack, tmp_path: Path, stop: str
) -> None:
    """A run whose saves were failing (a full disk) posted a queued notification, then was killed: the state on
    disk still had it queued, not even marked as being sent, and the next start posted it again. A run that did
    not stop cleanly now looks for each queued notification in Slack before posting it; after a clean stop
    nothing is looked for (each queued notification is then known not to be delivered)."""
    from lagwatch.alerts import Receiver
    from lagwatch.config import load_settings
    from lagwatch.daemon import Daemon
    from lagwatch.state import StateStore

    now = time.time()
    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0), receivers=(Receiver("slack"),))
    book.apply("prod", [finding("lag")], frozenset(), now)
    outbox = Outbox()
    outbox.add(book.due(now), ["slack"])
    store = StateStore(tmp_path).open()
    store.save_alerts(book, outbox)
    if stop == "killed":
        notifier(slack).send(outbox.deliveries[0].notification, None)  # delivered; never saved
        store.db._db.close()  # type: ignore[union-attr]  # and the run dies, as with SIGKILL
        store.db._db = None
    store.close()
    settings = load_settings(
        state_dir=tmp_path,
        http={"enabled": False},
        notifiers={
            "log": {"enabled": False},
            "slack": {"token": slack.token, "base_url": slack.base_url, "default_channel": "#kafka"},
        },
    )
    daemon = Daemon(settings, clusters={}).start()
    try:
        wait_for(lambda: daemon.outbox.pending() == 0, timeout=10, what="the queued notification delivered")
    finally:
        daemon.stop()
    posts = slack.delivered("chat.postMessage")
    assert len(posts) == 1, [p.args.get("text") for p in posts]
    assert bool(slack.delivered("conversations.history")) == (stop == "killed")
    # Stopped cleanly, the next start has nothing in doubt.
    again = StateStore(tmp_path).open()
    assert not again.db.unclean_stop
    again.close()
