"""EDGE: delivery of notifications (outbox, dispatcher thread, notifiers)."""

from collections.abc import Mapping
from typing import Any

from lagwatch.alerts import Receiver, Severity
from lagwatch.notify.base import DeliveryError, Notifier, PermanentError, RetryableError
from lagwatch.notify.dispatcher import Dispatcher, WorkerHealth
from lagwatch.notify.log import LogNotifier
from lagwatch.notify.outbox import Delivery, Outbox
from lagwatch.notify.settings import NotifiersConfig, Route


def build_notifiers(settings: Any) -> dict[str, tuple[Notifier, Route]]:
    """Every enabled notifier of the configuration, by name, with its route."""
    from lagwatch.notify.slack import SlackNotifier, SlackWebhookNotifier
    from lagwatch.notify.webhook import WebhookNotifier

    cfg: NotifiersConfig = settings.notifiers
    out: dict[str, tuple[Notifier, Route]] = {}
    if cfg.log.enabled:
        out["log"] = (LogNotifier(), cfg.log.route)
    if cfg.slack is not None and cfg.slack.enabled:
        out["slack"] = (SlackNotifier("slack", cfg.slack), cfg.slack.route)
    if cfg.slack_webhook is not None and cfg.slack_webhook.enabled:
        out["slack_webhook"] = (SlackWebhookNotifier("slack_webhook", cfg.slack_webhook), cfg.slack_webhook.route)
    hold = 1.5 * settings.alerts.repeat_interval_s
    for name, hook in cfg.webhooks.items():
        if hook.enabled:
            out[f"webhook:{name}"] = (WebhookNotifier(f"webhook:{name}", hook, hold), hook.route)
    return out


def receivers_of(notifiers: Mapping[str, Notifier], routes: Mapping[str, Route]) -> tuple[Receiver, ...]:
    """Each notifier with its route, as the alert book sees them (routing comes before dedup). A notifier that
    groups alerts itself (Alertmanager) gets every group, never a storm summary, which would hide most of them."""
    receivers = []
    for name, notifier in notifiers.items():
        route = routes.get(name) or Route()
        storms = not getattr(notifier, "groups_alerts_itself", False)
        receivers.append(Receiver(name, Severity(route.min_severity), tuple(sorted(route.matchers.items())), storms))
    return tuple(receivers)


__all__ = [
    "Delivery",
    "DeliveryError",
    "Dispatcher",
    "LogNotifier",
    "Notifier",
    "NotifiersConfig",
    "Outbox",
    "PermanentError",
    "RetryableError",
    "Route",
    "WorkerHealth",
    "build_notifiers",
    "receivers_of",
]
