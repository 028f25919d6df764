"""Secrets never reach the log, at any level, whichever library logs them: kafka-python's configuration dump,
slack-sdk's retries of an incoming webhook, lagwatch's own lines and tracebacks."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest
from kafka import KafkaAdminClient

from lagwatch import logs
from lagwatch.alerts import AlertBook, AlertsConfig
from lagwatch.collect.client import admin_client_options
from lagwatch.config import Settings
from lagwatch.model import Finding
from lagwatch.notify import DeliveryError
from lagwatch.notify.slack import SlackNotifier, SlackWebhookNotifier
from lagwatch.notify.webhook import WebhookNotifier

SASL_PASSWORD = "sasl-Pass-8d1e"
KEY_PASSWORD = "tls-KeyPass-77c2"
SLACK_TOKEN = "xoxb-123-456-SlackTok3n"
BEARER = "hook-Bearer-5f0a"
HOOK_PATH = "/services/T0001/B0001/Secret-Hook-Path-9"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    levels = {name: logging.getLogger(name).level for name in ("kafka", "slack_sdk", "apscheduler")}
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def failing_server() -> Iterator[str]:
    """Answers every POST with 500: slack-sdk retries, and lagwatch's notifiers fail."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(500)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"oops!")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(base_url: str) -> Settings:
    return Settings(
        clusters={
            "prod": {
                "bootstrap_servers": [f"127.0.0.1:{_closed_port()}"],
                "request_timeout_s": 1,
                "security": {
                    "protocol": "SASL_SSL",
                    "sasl": {"mechanism": "PLAIN", "username": "lagwatch", "password": SASL_PASSWORD},
                    "tls": {"key_password": KEY_PASSWORD},
                },
            }
        },
        notifiers={
            "slack": {"token": SLACK_TOKEN, "base_url": base_url + "/api/", "default_channel": "#x", "timeout_s": 2},
            "slack_webhook": {"url": base_url + HOOK_PATH, "timeout_s": 2},
            "webhooks": {"ops": {"url": base_url + "/hook", "bearer_token": BEARER, "timeout_s": 2}},
        },
    )


def _notification() -> Any:
    book = AlertBook(AlertsConfig(group_wait_s=0))
    book.apply(
        "prod", [Finding("lag", "warning", "prod", "g", {"cluster": "prod", "group": "g"}, "lagging")], frozenset(), 0
    )
    (n,) = book.due(0)
    return n


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_no_secret_reaches_stderr_at_any_level(
    failing_server: str, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    settings = _settings(failing_server)
    secrets = [SASL_PASSWORD, KEY_PASSWORD, SLACK_TOKEN, BEARER, failing_server + HOOK_PATH, HOOK_PATH[1:]]
    assert logs.secret_values(settings) >= {SASL_PASSWORD, KEY_PASSWORD, SLACK_TOKEN, BEARER}
    logs.configure("DEBUG", fmt, secrets=logs.secret_values(settings))

    # kafka-python's own client dumps its configuration at DEBUG, then fails to bootstrap.
    options = admin_client_options("prod", settings.clusters["prod"])
    options.update(security_protocol="SASL_PLAINTEXT", ssl_password=KEY_PASSWORD, bootstrap_timeout_ms=500)
    with pytest.raises(Exception):  # noqa: B017  (whatever kafka-python raises; not what this test is about)
        KafkaAdminClient(**options)
    logging.getLogger("kafka.conn").error("connect failed for %s", options)

    # slack-sdk, through lagwatch's notifiers, against a server answering 500 (so slack-sdk retries).
    n = _notification()
    assert settings.notifiers.slack_webhook is not None and settings.notifiers.slack is not None
    for notifier in (
        SlackWebhookNotifier("slack_webhook", settings.notifiers.slack_webhook),
        SlackNotifier("slack", settings.notifiers.slack),
        WebhookNotifier("webhook:ops", settings.notifiers.webhooks["ops"]),
    ):
        with pytest.raises(DeliveryError) as e:
            notifier.send(n, None)
        logging.getLogger("lagwatch.notify.dispatcher").warning("not delivered", extra={"error": str(e.value)})
    hook_url = settings.notifiers.slack_webhook.url.get_secret_value()
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        logging.getLogger("slack_sdk.webhook.client").log(level, f"A retry handler found for POST {hook_url}")
        logging.getLogger("slack_sdk.web.base_client").log(level, "headers: %s", {"Authorization": SLACK_TOKEN})
        logging.getLogger("lagwatch").log(level, "in extras", extra={"options": options, "url": hook_url})
    try:
        raise RuntimeError(f"boom with {SASL_PASSWORD} and {hook_url}")
    except RuntimeError:
        logging.getLogger("lagwatch").exception("with a traceback")

    err = capsys.readouterr().err
    assert "Starting KafkaAdminClient with configuration" in err  # kafka-python's dump was written, redacted
    assert "with a traceback" in err and "RuntimeError: boom with ***" in err
    assert "retry handler" in err and err.count("***") >= 10
    assert "ServerErrorRetryHandler" not in err  # slack-sdk's own INFO lines (with the URL) are not even written
    for secret in secrets:
        assert secret not in err, secret
    if fmt == "json":
        for line in err.splitlines():
            json.loads(line)  # still one JSON object per line


def test_known_secret_shapes_are_redacted_without_configuration() -> None:
    redact = logs.RedactSecrets().redact
    assert redact("POST https://hooks.slack.com/services/T1/B2/abcDEF failed") == (
        "POST https://hooks.slack.com/services/*** failed"
    )
    assert redact("token xoxb-1-2-abc, xoxp-9-zz") == "token ***, ***"
    assert redact("Authorization: Bearer abc.def-ghi") == "Authorization: Bearer ***"
    assert redact("https://user:pa55word@example.com/x") == "https://user:***@example.com/x"
    assert redact("lag 1234 on payments") == "lag 1234 on payments"


def test_short_values_are_not_taken_for_secrets() -> None:
    redact = logs.RedactSecrets(["ab", "long-enough"]).redact
    assert redact("about ab and long-enough") == "about ab and ***"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_with_a_backslash_or_a_non_ascii_letter_are_redacted_as_reprs_write_them(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """kafka-python logs the repr of its configuration and of the SASL bytes it sends: a password with a backslash
    reached the DEBUG log as 'Plain\\\\\\\\Backslash-42', one with an umlaut as b'P\\\\xc3\\\\xa4ssw...' (the raw value
    alone was looked for)."""
    sasl, key = "Plain\\Backslash-42", "Pässwörd-2024"
    logs.configure("DEBUG", fmt, secrets={sasl, key})
    options = {
        "bootstrap_servers": [f"127.0.0.1:{_closed_port()}"],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "lagwatch",
        "sasl_plain_password": sasl,
        "ssl_password": key,
        "bootstrap_timeout_ms": 500,
    }
    with pytest.raises(Exception):  # noqa: B017  (whatever kafka-python raises)
        KafkaAdminClient(**options)
    for secret in (sasl, key):  # as kafka-python's PLAIN mechanism logs what it sends
        logging.getLogger("kafka.sasl.plain").debug("auth_bytes=%r", b"lagwatch\x00lagwatch\x00" + secret.encode())
        logging.getLogger("lagwatch").info("in extras", extra={"options": {"password": secret}})
    err = capsys.readouterr().err
    assert "Starting KafkaAdminClient with configuration" in err
    for secret in (sasl, key):
        written = {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1], json.dumps(secret)[1:-1]}
        written |= {json.dumps(w)[1:-1] for w in list(written)}
        for form in written:
            assert form not in err, form


def test_apschedulers_skipped_and_missed_warnings_are_not_said_twice(capsys: pytest.CaptureFixture[str]) -> None:
    """lagwatch logs a skipped or missed poll itself, with its cluster; APScheduler's own warning made two lines
    for each during an outage."""
    import time

    from apscheduler.schedulers.background import BackgroundScheduler

    logs.configure("INFO", "json")
    scheduler = BackgroundScheduler()
    scheduler.add_job(time.sleep, "interval", args=[0.5], seconds=0.1, max_instances=1)
    scheduler.start()
    time.sleep(1.0)
    scheduler.shutdown(wait=True)
    logging.getLogger("apscheduler.scheduler").warning("something else went wrong")
    err = capsys.readouterr().err
    assert "maximum number of running instances" not in err
    assert "something else went wrong" in err  # its other warnings still show
