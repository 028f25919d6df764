"""Slack through a bot token (chat.postMessage / chat.update), and Slack incoming webhooks.

One message per alert group: a change updates it in place, a repeat replies in its thread, a resolution updates it
to resolved and replies in the thread. slack-sdk retries 429 (honouring Retry-After), 5xx and connection errors;
lagwatch paces messages to about one per second per channel. Each runs on its own notifier worker, never a
poll's thread. Errors are sorted into permanent (bad token, unknown or archived channel, rejected payload) and
retryable (the rest); a chat.update on a deleted message posts a new one instead.

Never a duplicate post: every message carries a key in its metadata (`lagwatch_notification`). A post whose answer
was lost (a timeout or a dropped connection after Slack may have acted), or one made by a previous run of lagwatch
that may have died before recording it, is first looked for with conversations.history since the attempt; if it
is there, it counts as delivered. That needs the channel's id (or a name Slack resolves) and the `channels:history`
scope (`groups:history` for private channels); without them lagwatch posts again and says so once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterator
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
from lagwatch.clock import MAX_SLEW_S
from lagwatch.notify import render
from lagwatch.notify.base import DeliveryError, PermanentError, RetryableError, http_status_error
from lagwatch.notify.settings import SlackConfig, SlackWebhookConfig

log = logging.getLogger(__name__)
METADATA_EVENT = "lagwatch_notification"

PACE_S = 1.0


def _retry_handlers(connection_errors: bool = True) -> list[Any]:
    # A dropped connection may come after Slack acted: the bot client leaves those to lagwatch, which looks for
    # the message before posting again. An incoming webhook cannot look, so slack-sdk retries for it.
    handlers: list[Any] = [RateLimitErrorRetryHandler(max_retry_count=3), ServerErrorRetryHandler(max_retry_count=2)]
    return [ConnectionErrorRetryHandler(max_retry_count=2), *handlers] if connection_errors else handlers


# How far back a post whose outcome is unknown is looked for: 20 pages of 200, Slack's largest page (Tier 3 calls,
# paced like the posts).
LOOKUP_PAGES, LOOKUP_PAGE_SIZE = 20, 200


class SlackNotifier:
    def __init__(self, name: str, config: SlackConfig) -> None:
        self.name = name
        self.config = config
        self.client = WebClient(
            token=config.token.get_secret_value(),
            base_url=config.base_url,
            timeout=math.ceil(config.timeout_s),  # whole seconds: int() made 0.5 s a 0
            retry_handlers=_retry_handlers(connection_errors=False),
        )
        self._last_post: dict[str, float] = {}
        self._lock = threading.Lock()
        self._uncertain: dict[str, float] = {}  # message key -> when a post whose outcome is unknown was tried
        self._lookup_warned = False

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

    @contextlib.contextmanager
    def _paced(self, channel: str) -> Iterator[None]:
        """About one call per second per channel (chat.postMessage's limit), waited for here on the notifier thread,
        and counted from the end of the previous call: counted from its start, two calls could reach Slack less than
        a second apart (the first slow on the way), and a 429's Retry-After sleep stops every channel: 163 of them
        in 300 s at 10,000 queued (bench/notify_drain_bench.py)."""
        with self._lock:
            wait = self._last_post.get(channel, 0.0) + PACE_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        try:
            yield
        finally:
            with self._lock:
                self._last_post[channel] = time.monotonic()

    def _call(self, method: str, channel: str, **kwargs: Any) -> Any:
        try:
            with self._paced(channel):
                return getattr(self.client, method)(channel=channel, **kwargs)
        except SlackApiError as e:
            raise _api_error(method, e) from None
        except Exception as e:  # connection errors and timeouts after slack-sdk's own retries
            raise RetryableError(f"slack {method}: {type(e).__name__}: {e}") from None

    def _post(self, n: Notification, key: str, channel: str, maybe_sent: bool, **message: Any) -> dict[str, Any]:
        """chat.postMessage, at most once per key: a post that may already have happened is looked for first."""
        since = self._uncertain.get(key)
        if since is None and maybe_sent:
            since = n.created_at  # an attempt of an earlier run, which may have posted it and died before saying so
        if since is not None:
            found = self._find_posted(channel, key, since)
            if found is not None:
                self._uncertain.pop(key, None)
                return found
        attempt = time.time()
        metadata = {"event_type": METADATA_EVENT, "event_payload": {"key": key}}
        try:
            response = self._call("chat_postMessage", channel, metadata=metadata, **message)
        except RetryableError as e:
            if "ratelimited" not in str(e):  # a 429 is a refusal; anything else may have reached Slack
                self._uncertain.setdefault(key, attempt)
            raise
        self._uncertain.pop(key, None)
        return {"channel": response["channel"], "ts": response["ts"]}

    def _find_posted(self, channel: str, key: str, since: float) -> dict[str, Any] | None:
        """The message posted with `key` since `since`, if any. Slack answers newest first, a page at a time: in a
        busy channel the post may lie behind hundreds of later messages (it was posted twice when only the first
        page was read)."""
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            try:
                with self._paced(channel):
                    page = self.client.conversations_history(
                        channel=channel,
                        # A margin for lagwatch's clock, which runs up to MAX_SLEW_S ahead after a host clock
                        # step back (`since` may be a notification's time, in lagwatch's clock, after a restart).
                        oldest=f"{since - 5 - MAX_SLEW_S:.6f}",
                        include_all_metadata=True,
                        limit=LOOKUP_PAGE_SIZE,
                        cursor=cursor,  # None on the first page: slack-sdk leaves it out
                    )
            except Exception as e:  # no scope, a channel name Slack does not resolve here, Slack down: post again
                if not self._lookup_warned:
                    self._lookup_warned = True
                    log.warning(
                        "cannot check Slack for a message that may already be posted; posting it (again)",
                        extra={"notifier": self.name, "error": f"{type(e).__name__}: {e}"[:200]},
                    )
                return None
            messages: list[dict[str, Any]] = page.get("messages", [])
            for message in messages:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if payload.get("key") == key:
                    return {"channel": page.get("channel_actual") or channel, "ts": message["ts"]}
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not page.get("has_more") or cursor is None:
                return None
        log.warning(
            "more messages in the channel since a post that may have gone through than lagwatch looks at; "
            "posting it (again)",
            extra={"notifier": self.name, "messages": LOOKUP_PAGES * LOOKUP_PAGE_SIZE},
        )
        return None

    checks_duplicates = True  # the dispatcher says when an earlier attempt's outcome is unknown

    def send(
        self, notification: Notification, ref: dict[str, Any] | None, maybe_sent: bool = False
    ) -> dict[str, Any] | None:
        text = render.fallback_text(notification)
        blocks = render.blocks(notification, self.config.grafana_url)
        key = f"{self.name}|{notification.group_key}|{notification.id}"
        if ref is None or notification.kind == "firing":
            # A new incident for this group: a message of its own.
            return self._post(notification, key, self.channel_for(notification), maybe_sent, text=text, blocks=blocks)
        try:
            self._call("chat_update", ref["channel"], ts=ref["ts"], text=text, blocks=blocks)
        except _MessageGone:
            # Someone deleted the message (or it can no longer be edited): the news goes out as a new message,
            # which later updates and replies then follow. Its thread went with it, so no reply this time.
            return self._post(notification, key, ref["channel"], maybe_sent, text=text, blocks=blocks)
        if notification.kind in ("repeat", "resolved"):
            reply = render.thread_text(notification)
            self._post(notification, key + "|reply", ref["channel"], maybe_sent, thread_ts=ref["ts"], text=reply)
        return ref

    def post_digest(self, title: str, lines: list[str]) -> None:
        """The report's digest in the default channel (rate limits and 5xx: slack-sdk's retries)."""
        text = "\n".join(lines)
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        ]
        self._call("chat_postMessage", self.config.default_channel, text=f"{title}\n{text}"[:3000], blocks=blocks)


# Slack's answers (the `error` field) that no retry can change: credentials, channel, or the message itself.
# Anything not listed (ratelimited, internal_error, fatal_error, service_unavailable, request_timeout, and codes
# Slack adds later) is retried until the notification's maximum age.
PERMANENT_SLACK_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "access_denied",
        "ekm_access_denied",
        "two_factor_setup_required",
        "team_access_not_granted",
        "org_login_required",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "msg_too_long",
        "no_text",
        "invalid_blocks",
        "invalid_blocks_format",
        "invalid_attachments",
        "too_many_attachments",
        "invalid_arguments",
        "invalid_arg_name",
        "invalid_array_arg",
        "invalid_charset",
        "invalid_form_data",
        "invalid_post_type",
        "missing_post_type",
        "method_deprecated",
        "deprecated_endpoint",
        "unknown_method",
    }
)
# chat.update's answers when the message to edit is gone or no longer editable.
MESSAGE_GONE_ERRORS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


class _MessageGone(PermanentError):
    """The message a chat.update aimed at is gone: a reason to post anew, not a failure."""


def _api_error(method: str, e: SlackApiError) -> DeliveryError:
    code = e.response.get("error")
    status = int(e.response.status_code)
    message = f"slack {method}: {code or f'HTTP {status}'}"
    if code in MESSAGE_GONE_ERRORS and method == "chat_update":
        return _MessageGone(message)
    if code in PERMANENT_SLACK_ERRORS:
        return PermanentError(message)
    if status != 200:  # slack-sdk already retried 429 and 5xx; pass on when Slack wants the next try
        return http_status_error(f"slack {method}", status, _header(e.response.headers, "Retry-After"), code or "")
    return RetryableError(message)


def _header(headers: Any, name: str) -> str | None:
    """A header from slack-sdk's response headers (a dict of str or of lists), whatever the case of its name."""
    for key, value in (headers or {}).items():
        if str(key).lower() == name.lower():
            return str(value[0] if isinstance(value, list) and value else value)
    return None


class SlackWebhookNotifier:
    """Incoming webhooks cannot update messages: firing, updates and resolved are separate messages."""

    def __init__(self, name: str, config: SlackWebhookConfig) -> None:
        self.name = name
        self.config = config
        self.client = WebhookClient(
            config.url.get_secret_value(), timeout=math.ceil(config.timeout_s), retry_handlers=_retry_handlers()
        )

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            response = self.client.send(
                text=render.fallback_text(notification), blocks=render.blocks(notification, self.config.grafana_url)
            )
        except Exception as e:  # connection errors and timeouts; the URL is a secret, so only the error's kind
            raise RetryableError(f"slack webhook: {type(e).__name__}") from None
        if response.status_code != 200:
            # Slack's webhook answers 400 invalid_payload, 403 action_prohibited, 404 no_service or
            # channel_not_found, 410 channel_is_archived: permanent. 5xx after slack-sdk's retries: retryable.
            raise http_status_error(
                "slack webhook",
                response.status_code,
                _header(response.headers, "Retry-After"),
                str(response.body)[:100],
            )
        return None

    def post_digest(self, title: str, lines: list[str]) -> None:
        try:
            response = self.client.send(text=f"*{title}*\n" + "\n".join(lines))
        except Exception as e:  # the URL is a secret: only the error's kind
            raise RetryableError(f"slack webhook: {type(e).__name__}") from None
        if response.status_code != 200:
            raise http_status_error("slack webhook", response.status_code, None, str(response.body)[:100])
