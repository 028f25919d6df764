"""Generic JSON webhook, and Alertmanager's push API (POST /api/v2/alerts), over plain HTTP(S).

The lagwatch webhook body (schema version 1):
  {"version": 1, "id", "kind": firing|update|repeat|resolved, "severity", "group_key", "group_labels": {...},
   "created_at": epoch seconds, "alerts": [{"rule", "severity", "state", "labels", "summary", "details",
   "started_at", "fired_at", "resolved_at", "runbook_url", "muted", "regrouped"}],
   "storm": null, or for a storm summary {"cluster", "groups_firing", "alerts_by_rule": {...}, "worst_groups": [...]}}
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from lagwatch.alerts import AlertState, Notification
from lagwatch.notify.base import Deadline, PermanentError, RetryableError, call_deadline_s, http_status_error
from lagwatch.notify.settings import WebhookConfig

_FIELDS = (
    "rule",
    "severity",
    "state",
    "labels",
    "summary",
    "details",
    "started_at",
    "fired_at",
    "resolved_at",
    "runbook_url",
)


def lagwatch_body(n: Notification) -> dict[str, Any]:
    return {
        "version": 1,
        "id": n.id,
        "kind": n.kind.value,
        "severity": n.severity_text,
        "group_key": n.group_key,
        "group_labels": dict(n.group_labels),
        "created_at": n.created_at,
        # `muted`: the alert left this notification silenced or inhibited; `regrouped`: it left for another alert
        # group (alerts.group_by changed). It still fires in both (state says resolved for receivers that only know
        # firing and resolved).
        "alerts": [
            {**{k: _plain(getattr(a, k)) for k in _FIELDS}, "muted": a.muted, "regrouped": a.regrouped}
            for a in n.alerts
        ],
        "storm": None if n.storm is None else n.storm.to_json(),
    }


def _plain(value: Any) -> Any:
    """A record's field as JSON takes it: mappings as objects, enums as their text."""
    if isinstance(value, Mapping):
        return dict(value)
    return value.value if isinstance(value, StrEnum) else value


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def alertmanager_body(n: Notification, hold_s: float) -> list[dict[str, Any]]:
    """Firing alerts hold for `hold_s` unless lagwatch sends them again; resolved ones end at their resolution."""
    out = []
    for a in n.alerts:
        if a.regrouped:  # it fires on, pushed by its new group: ended here, Alertmanager would resolve it
            continue
        ends = a.resolved_at if a.state == AlertState.RESOLVED and a.resolved_at else n.created_at + hold_s
        annotations = {"summary": a.summary}
        if a.runbook_url:
            annotations["runbook_url"] = a.runbook_url
        # Severity is part of an Alertmanager alert's identity: the alert of the severity it had before ends now.
        for severity, until in ((a.severity, ends), (a.previous_severity, n.created_at)):
            if severity:
                out.append(
                    {
                        "labels": {"alertname": f"lagwatch_{a.rule}", "severity": severity.value, **a.labels},
                        "annotations": annotations,
                        "startsAt": _iso(a.fired_at or a.started_at),
                        "endsAt": _iso(until),
                    }
                )
    return out


class WebhookNotifier:
    def __init__(self, name: str, config: WebhookConfig, alertmanager_hold_s: float = 3 * 3600) -> None:
        self.name = name
        self.config = config
        self.hold_s = alertmanager_hold_s
        self._deadline = Deadline(f"webhook {name}", call_deadline_s(config.timeout_s))

    @property
    def groups_alerts_itself(self) -> bool:
        """Alertmanager groups what it is pushed: storm summaries would hide most alerts from it."""
        return self.config.format == "alertmanager"

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        if self.config.format == "alertmanager":
            url = self.config.url.rstrip("/") + "/api/v2/alerts"
            body: Any = alertmanager_body(notification, self.hold_s)
        else:
            url, body = self.config.url, lagwatch_body(notification)
        self._post(url, body)
        return None

    def post_digest(self, title: str, lines: list[str]) -> None:
        if self.config.format == "alertmanager":
            raise PermanentError(f"webhook {self.name} speaks Alertmanager's API, which has no place for a digest")
        self._post(self.config.url, {"version": 1, "kind": "digest", "title": title, "lines": lines})

    def _post(self, url: str, body: Any) -> None:
        url, basic = _basic_auth(url)
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("User-Agent", "lagwatch")
        if self.config.bearer_token is not None:
            request.add_header("Authorization", f"Bearer {self.config.bearer_token.get_secret_value()}")
        elif basic is not None:
            request.add_header("Authorization", basic)

        def call() -> None:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                response.read()

        try:
            self._deadline.run(call)
        except urllib.error.HTTPError as e:
            # 4xx (but 408 and 429) says the receiver will never take this notification; 5xx may pass.
            raise http_status_error(f"webhook {self.name}", e.code, e.headers.get("Retry-After")) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            # Refused, reset, timed out, DNS, a garbled answer: the receiver may be back later.
            raise RetryableError(f"webhook {self.name}: {getattr(e, 'reason', None) or type(e).__name__}") from None


def _basic_auth(url: str) -> tuple[str, str | None]:
    """`http://user:pw@host/...` as the URL without its credentials and their Basic authorization header: urllib
    took `user:pw@host` for the host name ("Name or service not known", at every retry)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return bare, "Basic " + base64.b64encode(credentials.encode()).decode()
