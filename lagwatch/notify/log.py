"""The log notifier (the embedded default): one structured log line per notification."""

from __future__ import annotations

import logging
from typing import Any

from lagwatch.alerts import Notification, NotificationKind
from lagwatch.notify import render

log = logging.getLogger("lagwatch.alert")


class LogNotifier:
    name = "log"

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        level = logging.WARNING if notification.kind != NotificationKind.RESOLVED else logging.INFO
        severity = notification.severity_text
        said = render.outcome(notification)  # an inhibited alert is muted, never "resolved" (as Slack says)
        if notification.storm is not None:
            log.log(
                level,
                f"[{said.upper()}:{severity}] {render.storm_text(notification)}",
                extra={
                    "notification_id": notification.id,
                    "kind": notification.kind.value,
                    "storm": notification.storm.to_json(),
                },
            )
            return None
        log.log(
            level,
            f"[{said.upper()}:{severity}] {notification.group_key}: "
            + "; ".join(f"{a.rule} ({render.alert_state(a)}, {a.severity}): {a.summary}" for a in notification.alerts),
            extra={
                "notification_id": notification.id,
                "kind": said,
                "severity": severity,
                "group": dict(notification.group_labels),
                "alerts": [
                    {
                        "rule": a.rule,
                        "severity": a.severity.value,
                        "labels": dict(a.labels),
                        "summary": a.summary,
                        "started_at": a.started_at,
                        "resolved_at": a.resolved_at,
                        "state": render.alert_state(a),
                    }
                    for a in notification.alerts
                ],
            },
        )
        return None

    def post_digest(self, title: str, lines: list[str]) -> None:
        log.info(f"{title}: " + "; ".join(lines), extra={"kind": "digest"})
