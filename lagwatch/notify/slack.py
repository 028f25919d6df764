"""Slack through a bot token (chat.postMessage / chat.update), and Slack incoming webhooks.

One message per alert group: a change updates it in place, a repeat replies in its thread, a resolution updates it
to resolved and replies in the thread. slack-sdk retries 429 (honouring Retry-After), 5xx and connection errors;
lagwatch paces messages to about one per second per channel. Both run on the notifier thread, never a poll's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.webhook import WebhookClient

from lagwatch.alerts import Notification
from lagwatch.notify import render
from lagwatch.notify.base import DeliveryError
from lagwatch.notify.settings import SlackConfig, SlackWebhookConfig

PACE_S = 1.0


def _retry_handlers() -> list[Any]:
    return [
        ConnectionErrorRetryHandler(max_retry_count=2),
        RateLimitErrorRetryHandler(max_retry_count=3),
        ServerErrorRetryHandler(max_retry_count=2),
    ]


class SlackNotifier:
    def __init__(self, name: str, config: SlackConfig) -> None:
        self.name = name
        self.config = config
        self.client = WebClient(
            token=config.token.get_secret_value(),
            base_url=config.base_url,
            timeout=int(config.timeout_s),
            retry_handlers=_retry_handlers(),
        )
        self._last_post: dict[str, float] = {}
        self._lock = threading.Lock()

    def channel_for(self, n: Notification) -> str:
        worst = (n.firing or list(n.alerts) or [{}])[0]
        labels: dict[str, str] = worst.get("labels", {})
        cfg = self.config
        if cfg.channel_label and labels.get(cfg.channel_label):
            return labels[cfg.channel_label]
        if worst.get("rule") in cfg.rule_channels:
            return cfg.rule_channels[worst["rule"]]
        for label, channels in cfg.channels_by_label.items():
            if labels.get(label) in channels:
                return channels[labels[label]]
        return cfg.default_channel

    def _pace(self, channel: str) -> None:
        # chat.postMessage allows about one message per second per channel: wait here, on the notifier thread.
        with self._lock:
            wait = self._last_post.get(channel, 0.0) + PACE_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last_post[channel] = time.monotonic()

    def _call(self, method: str, channel: str, **kwargs: Any) -> Any:
        self._pace(channel)
        try:
            return getattr(self.client, method)(channel=channel, **kwargs)
        except SlackApiError as e:
            raise DeliveryError(f"slack {method}: {e.response.get('error', e.response.status_code)}") from None
        except Exception as e:  # connection errors after slack-sdk's own retries
            raise DeliveryError(f"slack {method}: {type(e).__name__}: {e}") from None

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        text = render.fallback_text(notification)
        blocks = render.blocks(notification, self.config.grafana_url)
        if ref is None or notification.kind == "firing":
            # A new incident for this group: a message of its own.
            channel = self.channel_for(notification)
            response = self._call("chat_postMessage", channel, text=text, blocks=blocks)
            return {"channel": response["channel"], "ts": response["ts"]}
        self._call("chat_update", ref["channel"], ts=ref["ts"], text=text, blocks=blocks)
        if notification.kind in ("repeat", "resolved"):
            self._call("chat_postMessage", ref["channel"], thread_ts=ref["ts"], text=render.thread_text(notification))
        return ref


class SlackWebhookNotifier:
    """Incoming webhooks cannot update messages: firing, updates and resolved are separate messages."""

    def __init__(self, name: str, config: SlackWebhookConfig) -> None:
        self.name = name
        self.config = config
        self.client = WebhookClient(
            config.url.get_secret_value(), timeout=int(config.timeout_s), retry_handlers=_retry_handlers()
        )

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            response = self.client.send(
                text=render.fallback_text(notification), blocks=render.blocks(notification, self.config.grafana_url)
            )
        except Exception as e:
            raise DeliveryError(
                f"slack webhook: {type(e).__name__}"
            ) from None  # the URL is a secret: not in the message
        if response.status_code != 200:
            raise DeliveryError(f"slack webhook: HTTP {response.status_code} {response.body[:100]}")
        return None
