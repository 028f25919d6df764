"""Structured logs: JSON lines in containers (stderr not a terminal), readable text on a terminal.

Secrets never reach the log: libraries log them on their own (slack-sdk the incoming-webhook URL at INFO when it
retries, kafka-python its whole configuration, SASL and TLS key passwords included, at DEBUG). `configure` puts
a filter on the root handler that replaces every configured secret value, and the known shapes of secrets
(Slack webhook URLs and tokens, bearer tokens, passwords in URLs), in each message, its extra fields and its
traceback, whatever logger it came from.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from pydantic import BaseModel, SecretStr

from lagwatch.escape import visible
from lagwatch.notify.settings import WebhookConfig

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
REDACTED = "***"
# Shorter values are not redacted: replacing every "ab" in every line would garble the log, and the gaps would show
# where, and so what, the secret is. A real password, token or URL is longer.
MIN_SECRET_LENGTH = 4
# Shapes that are secret whatever the configuration says, e.g. a URL some library builds or prints.
_KNOWN_SHAPES = [
    (re.compile(r"(hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/)[^\s'\"<>)\]}]+"), rf"\1{REDACTED}"),
    (re.compile(r"\bxox[abeoprs]-[A-Za-z0-9-]+"), REDACTED),  # Slack tokens
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), rf"\1{REDACTED}"),
    (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), rf"\1{REDACTED}@"),  # https://user:password@host
]


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def secret_values(model: object) -> set[str]:
    """Every SecretStr value in a pydantic model, however deep (clusters, notifiers, http tokens...), and the
    generic webhooks' URLs."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, WebhookConfig):  # its URL may hold a token: never logged either
            found.add(value.url)
            walk(value.bearer_token)
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple | set | frozenset):
            for item in value:
                walk(item)

    walk(model)
    return found


class RedactSecrets(logging.Filter):
    """Replaces secrets in a record before any formatter sees it. On a handler, it covers every logger."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        forms = {form for s in secrets if len(s) >= MIN_SECRET_LENGTH for form in _written_forms(s)}
        values = sorted(forms, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def redact(self, text: str) -> str:
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        for pattern, replacement in _KNOWN_SHAPES:
            text = pattern.sub(replacement, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: logging reports it; leave the record as it was
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        for key, value in _extras(record).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            clean = self.redact(text)
            if clean != text:
                setattr(record, key, clean)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def _written_forms(secret: str) -> set[str]:
    """A secret as a log line may hold it: as it is, and as reprs and JSON write it. kafka-python logs the repr of
    its config and of the SASL bytes it sends: a password with a backslash (doubled in a repr) or a non-ASCII
    letter (escaped as UTF-8 bytes) reached the DEBUG log untouched."""
    forms = {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1], json.dumps(secret)[1:-1]}
    forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
    forms |= {json.dumps(form)[1:-1] for form in list(forms)}  # any of them inside a JSON-encoded field
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def _traceback(record: logging.LogRecord) -> str | None:
    # The filter leaves the (redacted) traceback in exc_text; format it here only if no filter ran.
    if record.exc_text:
        return record.exc_text
    if record.exc_info:
        return logging.Formatter().formatException(record.exc_info)
    return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        trace = _traceback(record)
        if trace:
            entry["exception"] = trace.splitlines()[-1]
            entry["traceback"] = trace.splitlines()
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """One event, one line: what a message or a field holds (a group id with a newline, a carriage return, an ANSI
    escape) is written escaped (lagwatch.escape.visible), so it can neither forge a line nor reach the terminal
    raw. A traceback follows on lines of its own, each indented, so none of them reads as an event."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items() if k not in ("alerts", "group"))
        line = f"{ts} {record.levelname:<7} {record.getMessage()}" + (f"  [{extras}]" if extras else "")
        trace = _traceback(record)
        if trace:
            return visible(line) + "".join(f"\n    {visible(part)}" for part in trace.splitlines())
        return visible(line)


def _said_by_lagwatch(record: logging.LogRecord) -> bool:
    """APScheduler's warnings of a skipped or missed poll: lagwatch logs each itself, with its cluster ("poll
    skipped", "poll missed its start time", and counts them): two lines for one event during an outage."""
    return not (
        record.name.startswith("apscheduler")
        and isinstance(record.msg, str)
        and ("maximum number of running instances" in record.msg or "was missed by" in record.msg)
    )


def configure(level: str = "INFO", fmt: str = "auto", secrets: Iterable[str] = ()) -> None:
    """Logs to stderr at `level`; `secrets` (e.g. `secret_values(settings)`) never appear in what is written."""
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RedactSecrets(secrets))
    handler.addFilter(_said_by_lagwatch)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))
    # kafka-python logs every connection failure with a traceback; lagwatch reports them itself, in one line.
    logging.getLogger("kafka").setLevel(logging.DEBUG if level == "DEBUG" else logging.CRITICAL)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # slack-sdk logs request URLs (an incoming webhook's is its secret) and bodies at INFO and DEBUG: drop those.
    logging.getLogger("slack_sdk").setLevel(logging.WARNING)
