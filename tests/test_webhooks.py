"""Generic webhook, Alertmanager push, Slack incoming webhook and `lagwatch notify-test`, against receivers on
loopback."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lagwatch.alerts import AlertBook, AlertsConfig, Notification
from lagwatch.model import Finding, Severity
from lagwatch.notify.base import DeliveryError
from lagwatch.notify.settings import SlackWebhookConfig, WebhookConfig
from lagwatch.notify.slack import SlackWebhookNotifier
from lagwatch.notify.webhook import WebhookNotifier
from tests.conftest import run_lagwatch
from tests.fake_slack import FakeSlack


class Receiver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.status = 200
        self.trickle_s = 0.0  # the answer's body a byte at a time, this far apart
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((self.path, dict(self.headers), json.loads(body or b"null")))
                self.send_response(receiver.status)
                body = b"ok" * 50 if receiver.trickle_s else b"ok"
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(len(body)) if receiver.trickle_s else ():
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(receiver.trickle_s)
                if not receiver.trickle_s:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def notifications() -> tuple[Notification, Notification]:
    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0))
    f = Finding(
        "stalled",
        "critical",
        "prod",
        "billing",
        {"cluster": "prod", "group": "billing", "topic": "t", "team": "b"},
        "billing stalled",
        {"partitions": [0]},
        0,
        "https://runbooks.example/stalled",
    )
    book.apply("prod", [f], frozenset(), 100.0)
    (firing,) = book.due(100.0)
    book.apply("prod", [], frozenset(), 160.0)
    (resolved,) = book.due(160.0)
    return firing, resolved


def test_lagwatch_webhook_body_and_bearer_token(receiver: Receiver) -> None:
    firing, resolved = notifications()
    hook = WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url + "/hook", bearer_token="hook-Token-5"))
    hook.send(firing, None)
    hook.send(resolved, None)
    (path, headers, body), (_, _, done) = receiver.requests
    assert path == "/hook" and headers["Authorization"] == "Bearer hook-Token-5"
    assert (
        body["version"] == 1
        and body["kind"] == "firing"
        and body["group_labels"] == {"cluster": "prod", "group": "billing"}
    )
    (alert,) = body["alerts"]
    assert (alert["rule"], alert["severity"], alert["state"], alert["labels"]["team"]) == (
        "stalled",
        "critical",
        "firing",
        "b",
    )
    assert alert["runbook_url"] == "https://runbooks.example/stalled" and alert["fired_at"] == 100.0
    assert done["kind"] == "resolved" and done["alerts"][0]["resolved_at"] == 160.0


def test_credentials_in_the_url_are_sent_as_basic_auth(receiver: Receiver) -> None:
    """`http://user:pw@host/hook` validated, then never arrived: urllib took `user:pw@host` for the host name."""
    import base64

    firing, _ = notifications()
    url = receiver.url.replace("http://", "http://ops%40team:s3cr%3At@") + "/hook"
    WebhookNotifier("webhook:ops", WebhookConfig(url=url)).send(firing, None)
    ((path, headers, body),) = receiver.requests
    assert path == "/hook" and body["kind"] == "firing"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops@team:s3cr:t").decode()


def test_alertmanager_push(receiver: Receiver) -> None:
    firing, resolved = notifications()
    am = WebhookNotifier("webhook:am", WebhookConfig(url=receiver.url, format="alertmanager"), alertmanager_hold_s=600)
    am.send(firing, None)
    am.send(resolved, None)
    (path, _, alerts), (_, _, ended) = receiver.requests
    assert path == "/api/v2/alerts"
    (a,) = alerts
    assert a["labels"] == {
        "alertname": "lagwatch_stalled",
        "severity": "critical",
        "cluster": "prod",
        "group": "billing",
        "topic": "t",
        "team": "b",
    }
    assert a["annotations"] == {"summary": "billing stalled", "runbook_url": "https://runbooks.example/stalled"}
    assert a["startsAt"] == "1970-01-01T00:01:40Z" and a["endsAt"] == "1970-01-01T00:11:40Z"  # held for 600 s
    assert ended[0]["endsAt"] == "1970-01-01T00:02:40Z"  # resolved: ends when it resolved
    # An escalation: severity is part of an Alertmanager alert's identity, so the warning it replaces ends now.
    escalated = dataclasses.replace(
        firing,
        created_at=130.0,
        alerts=(dataclasses.replace(firing.alerts[0], severity=Severity.CRITICAL, previous_severity=Severity.WARNING),),
    )
    am.send(escalated, None)
    (_, _, pushed) = receiver.requests[-1]
    assert [(x["labels"]["severity"], x["endsAt"]) for x in pushed] == [
        ("critical", "1970-01-01T00:12:10Z"),
        ("warning", "1970-01-01T00:02:10Z"),
    ]


def test_webhook_failures_raise_without_secrets(receiver: Receiver) -> None:
    firing, _ = notifications()
    receiver.status = 500
    hook = WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url, bearer_token="hook-Token-5"))
    with pytest.raises(DeliveryError, match="HTTP 500") as e:
        hook.send(firing, None)
    assert "Token" not in str(e.value)
    receiver.status = 200
    secret_url = receiver.url + "/services/T000/B000/Secret-Path-7"
    slack_hook = SlackWebhookNotifier("slack_webhook", SlackWebhookConfig(url=secret_url))
    slack_hook.send(firing, None)
    (path, _, body) = receiver.requests[-1]
    assert path.endswith("Secret-Path-7") and body["text"].startswith("[FIRING] CRITICAL") and body["blocks"]
    receiver.stop()
    with pytest.raises(DeliveryError) as e:
        slack_hook.send(firing, None)
    assert "Secret" not in str(e.value)


def test_notify_test_command(tmp_path: Path) -> None:
    slack = FakeSlack().start()
    try:
        config = tmp_path / "c.yaml"
        config.write_text(
            json.dumps(
                {
                    "notifiers": {
                        "log": {"enabled": False},
                        "slack": {"base_url": slack.base_url, "default_channel": "#alerts"},
                        "webhooks": {"down": {"url": "http://127.0.0.1:9/nothing", "timeout_s": 2}},
                    }
                }
            )
        )
        env = {"LAGWATCH_NOTIFIERS__SLACK__TOKEN": slack.token}
        done = run_lagwatch("notify-test", "--config", str(config), "--notifier", "slack", env=env)
        assert done.returncode == 0 and done.stdout.strip() == "slack: sent", done.stderr
        (call,) = slack.delivered("chat.postMessage")
        assert call.args["channel"] == "#alerts" and "notify-test" in call.args["text"]
        done = run_lagwatch("notify-test", "--config", str(config), env=env)
        assert (
            done.returncode == 1
            and "webhook:down: not sent" in done.stderr
            and slack.token not in done.stderr + done.stdout
        )
        done = run_lagwatch("notify-test", "--config", str(config), "--notifier", "pager", env=env)
        assert done.returncode == 2 and "--notifier: 'pager' is not configured" in done.stderr
        # Nothing configured: it printed nothing and exited 0, as if every notifier had worked.
        (tmp_path / "none.yaml").write_text("notifiers: {log: {enabled: false}}\n")
        done = run_lagwatch("notify-test", "--config", str(tmp_path / "none.yaml"))
        assert done.returncode == 2 and "notifiers: none is configured" in done.stderr, done.stderr
    finally:
        slack.stop()


def test_an_answer_that_trickles_in_is_given_up_on_in_bounded_time(receiver: Receiver) -> None:
    """A receiver answering a byte every 0.2 s: each read within the timeout, and the webhook's worker was held
    for as long as the receiver liked (a minute and more), its later deliveries stuck. The whole call has a
    deadline: a retryable failure (it reached the receiver) in about twice the timeout."""
    receiver.trickle_s = 0.2
    hook = WebhookNotifier("webhook:ops", WebhookConfig(url=receiver.url, timeout_s=0.5))
    firing, _ = notifications()
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="no full answer within 2 s"):
        hook.send(firing, None)
    assert time.monotonic() - started < 3 and len(receiver.requests) == 1
