"""Slack through a bot token (chat.postMessage / chat.update), and Slack incoming webhooks.

One message per alert group: a change updates it in place, a repeat replies in its thread, a resolution updates it
to resolved and replies in the thread. lagwatch paces messages to about one per second per channel. Each runs on its
own notifier worker, never a poll's thread. Errors are sorted into permanent (bad token, unknown or archived
channel, rejected payload) and retryable (the rest: the dispatcher retries, honouring Retry-After up to its cap);
a chat.update on a deleted message posts a new one instead. slack-sdk's own retries are off: they re-posted after
a 500 that came once Slack had acted, and slept out any Retry-After (a day) inside the worker.

Never a duplicate post: every message carries a key in its metadata (`lagwatch_notification`). A post whose answer
was lost (a timeout, a 5xx or a dropped connection after Slack may have acted), or one made by a previous run of
lagwatch that may have died before recording it, is first looked for since the attempt: with conversations.history
for a message, with conversations.replies for a reply in a thread (history lists no replies). If it is there, it
counts as delivered. A lookup that fails for a while (Slack down) is tried again, never taken for "not there". That
needs the channel's id: a channel configured by name is looked up with conversations.list (the `channels:read`
scope, `groups:read` for private ones) or learnt from a post's answer; and the `channels:history` scope
(`groups:history`). Without the scopes lagwatch posts again and says so once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from lagwatch.alerts import Notification
from lagwatch.clock import MAX_SLEW_S
from lagwatch.notify import render
from lagwatch.notify.base import (
    Deadline,
    DeliveryError,
    PermanentError,
    RetryableError,
    call_deadline_s,
    http_status_error,
)
from lagwatch.notify.settings import SlackConfig, SlackWebhookConfig

log = logging.getLogger(__name__)
METADATA_EVENT = "lagwatch_notification"

PACE_S = 1.0
# A link in a message is never previewed: none is lagwatch's but the operator's runbook and dashboard.
_NO_UNFURL = {"unfurl_links": False, "unfurl_media": False}


# Lookups Slack refuses for want of a scope or a channel this token sees: lagwatch cannot check, and posts again.
CANNOT_LOOK_ERRORS = frozenset(
    {"missing_scope", "not_allowed_token_type", "no_permission", "access_denied", "channel_not_found", "not_in_channel"}
)
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]+")  # a conversation's id (C024BE91L); channel names are lowercase


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
            retry_handlers=[],  # lagwatch's dispatcher retries (see the module's docstring)
        )
        self._deadline = Deadline(f"slack {name}", call_deadline_s(config.timeout_s))
        self._last_post: dict[str, float] = {}
        self._lock = threading.Lock()
        self._uncertain: dict[str, float] = {}  # message key -> when a post whose outcome is unknown was tried
        self._channel_ids: dict[str, str] = {}  # channel name (without #) -> id: learnt from posts and lookups
        self._lookup_warned = False
        self.recover_since: float | None = None  # see recover_messages_since
        self._recovered_groups: set[str] = set()

    def channel_for(self, n: Notification) -> str:
        shown = n.firing or list(n.alerts)
        cfg = self.config
        if not shown:
            return cfg.default_channel
        worst = shown[0]
        labels = worst.labels
        if cfg.channel_label and labels.get(cfg.channel_label):
            return labels[cfg.channel_label]
        if worst.rule in cfg.rule_channels:
            return cfg.rule_channels[worst.rule]
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
        return self._request(method, channel, channel=channel, **kwargs)

    def _request(self, method: str, pace: str | None, lookup: bool = False, **args: Any) -> Any:
        """One Web API call, bounded in time (Deadline) and paced per channel (`pace`), its failures as
        DeliveryError. With `lookup`, a refusal for want of a scope or a channel (CANNOT_LOOK_ERRORS) gives None,
        after one warning: lagwatch cannot look."""
        try:
            with self._paced(pace) if pace is not None else contextlib.nullcontext():
                return self._deadline.run(lambda: getattr(self.client, method)(**args))
        except SlackApiError as e:
            code = e.response.get("error")
            if lookup and (code in CANNOT_LOOK_ERRORS or code in PERMANENT_SLACK_ERRORS):
                self._cannot_look(f"{method}: {code}")  # a lookup refused is never the delivery's refusal
                return None
            raise _api_error(method, e) from None
        except DeliveryError:
            raise
        except Exception as e:  # connection errors and timeouts
            raise RetryableError(f"slack {method}: {type(e).__name__}: {e}") from None

    def _post(self, n: Notification, key: str, channel: str, maybe_sent: bool, **message: Any) -> dict[str, Any]:
        """chat.postMessage, at most once per key: a post that may already have happened is looked for first."""
        since = self._uncertain.get(key)
        if since is None and maybe_sent:
            since = n.created_at  # an attempt of an earlier run, which may have posted it and died before saying so
        if since is not None:
            found = self._find_posted(channel, key, since, message.get("thread_ts"))
            if found is not None:
                self._uncertain.pop(key, None)
                return found
        attempt = time.time()
        metadata = {"event_type": METADATA_EVENT, "event_payload": {"key": key}}
        try:
            response = self._call("chat_postMessage", channel, metadata=metadata, **message)
        except RetryableError as e:
            if e.maybe_acted:  # a timeout, a 5xx, a dropped connection: looked for before the next post
                self._uncertain.setdefault(key, attempt)
            raise
        self._uncertain.pop(key, None)
        if not _CHANNEL_ID.fullmatch(channel):  # a name: its id, for a lookup after a lost answer
            self._channel_ids[channel.lstrip("#")] = response["channel"]
        return {"channel": response["channel"], "ts": response["ts"]}

    def _find_posted(self, channel: str, key: str, since: float, thread_ts: str | None = None) -> dict[str, Any] | None:
        found = self._find(channel, since, thread_ts, lambda k: k == key)
        return None if found is None else {"channel": found["channel"], "ts": found["ts"]}

    def _find(
        self, channel: str, since: float, thread_ts: str | None, wanted: Callable[[str], bool]
    ) -> dict[str, Any] | None:
        """The newest message (or, with `thread_ts`, reply in that thread) since `since` whose key is `wanted`, as
        {channel, ts, text}, if any.
        None when it is not there, or when lagwatch cannot look (a scope missing: it posts again and says so
        once). A lookup Slack does not answer (down, 5xx, rate limited, too slow) raises RetryableError: taken for
        "not there", it posted twice. Slack answers history newest first, a page at a time: in a busy channel the
        post may lie behind hundreds of later messages (it was posted twice when only the first page was read)."""
        channel_id = self._channel_id(channel)
        if channel_id is None:
            return None
        # A margin for lagwatch's clock, which runs up to MAX_SLEW_S ahead after a host clock step back (`since`
        # may be a notification's time, in lagwatch's clock, after a restart).
        oldest = f"{since - 5 - MAX_SLEW_S:.6f}"
        method = "conversations_replies" if thread_ts else "conversations_history"
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            # include_all_metadata: the key; a cursor of None on the first page is left out by slack-sdk
            args = {"oldest": oldest, "include_all_metadata": True, "limit": LOOKUP_PAGE_SIZE, "cursor": cursor}
            if thread_ts:
                args["ts"] = thread_ts
            page = self._request(method, channel_id, lookup=True, channel=channel_id, **args)
            if page is None:
                return None
            messages: list[dict[str, Any]] = page.get("messages", [])
            for message in messages:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if isinstance(payload.get("key"), str) and wanted(payload["key"]):
                    return {"channel": channel_id, "ts": message["ts"], "text": message.get("text") or ""}
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not page.get("has_more") or cursor is None:
                return None
        log.warning(
            "more messages in the channel since a post that may have gone through than lagwatch looks at; "
            "posting it (again)",
            extra={"notifier": self.name, "messages": LOOKUP_PAGES * LOOKUP_PAGE_SIZE},
        )
        return None

    def _channel_id(self, channel: str) -> str | None:
        """The id of a channel configured by id or by name (history and replies take ids only)."""
        if _CHANNEL_ID.fullmatch(channel):
            return channel
        name = channel.lstrip("#")
        if name in self._channel_ids:
            return self._channel_ids[name]
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            page = self._request(
                "conversations_list",
                None,
                lookup=True,
                types="public_channel,private_channel",
                limit=LOOKUP_PAGE_SIZE,
                cursor=cursor,
            )
            if page is None:
                return None
            channels: list[Any] = page.get("channels", [])
            for c in channels:
                if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("id"), str):
                    self._channel_ids[c["name"]] = c["id"]
            if name in self._channel_ids:
                return self._channel_ids[name]
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                break
        self._cannot_look(f"no channel named {name} among those the token sees")
        return None

    def _cannot_look(self, why: str) -> None:
        if not self._lookup_warned:
            self._lookup_warned = True
            log.warning(
                "cannot check Slack for a message that may already be posted; posting it (again)",
                extra={"notifier": self.name, "error": why[:200]},
            )

    checks_duplicates = True  # the dispatcher says when an earlier attempt's outcome is unknown

    def recover_messages_since(self, since: float) -> None:
        """The state lagwatch started from is older than the last run's (damaged, a copy, or none): an incident
        firing now may have been announced since `since`, in a message this state does not know. The first firing
        of each group looks for that message and updates it instead of announcing the incident again."""
        self.recover_since = since

    def _message_of_lost_state(self, n: Notification) -> dict[str, Any] | None:
        """The newest message of `n`'s group posted since `recover_since`, if the incident it tells is not
        resolved; asked once per group."""
        if n.group_key in self._recovered_groups or self.recover_since is None:
            return None
        prefix = f"{self.name}|{n.group_key}|"
        found = self._find(self.channel_for(n), self.recover_since, None, lambda k: k.startswith(prefix))
        self._recovered_groups.add(n.group_key)  # after the lookup: one that failed (retried) asks again
        if found is None or found["text"].startswith("[RESOLVED]"):
            return None
        return {"channel": found["channel"], "ts": found["ts"]}

    def send(
        self, notification: Notification, ref: dict[str, Any] | None, maybe_sent: bool = False
    ) -> dict[str, Any] | None:
        key = f"{self.name}|{notification.group_key}|{notification.id}"
        try:
            return self._send(notification, ref, maybe_sent, key)
        except RetryableError as e:
            if not e.maybe_acted and (key in self._uncertain or key + "|reply" in self._uncertain):
                e.maybe_acted = True  # refused now, but an earlier attempt's post may still be in Slack
            raise

    def _send(
        self, notification: Notification, ref: dict[str, Any] | None, maybe_sent: bool, key: str
    ) -> dict[str, Any] | None:
        text = render.fallback_text(notification)
        blocks = render.blocks(notification, self.config.grafana_url)
        if ref is None and notification.kind == "firing" and self.recover_since is not None:
            ref = self._message_of_lost_state(notification)
            if ref is not None:  # the incident's message is there: it is updated, not announced again
                self._call("chat_update", ref["channel"], ts=ref["ts"], text=text, blocks=blocks)
                reply = ":information_source: lagwatch restarted without its saved state; this is still firing"
                self._post(notification, key + "|reply", ref["channel"], maybe_sent, thread_ts=ref["ts"], text=reply)
                return ref
        if ref is None or notification.kind == "firing":
            # A new incident for this group: a message of its own.
            return self._post(
                notification, key, self.channel_for(notification), maybe_sent, text=text, blocks=blocks, **_NO_UNFURL
            )
        try:
            self._call("chat_update", ref["channel"], ts=ref["ts"], text=text, blocks=blocks)
        except _MessageGone:
            # Someone deleted the message (or it can no longer be edited): the news goes out as a new message,
            # which later updates and replies then follow. Its thread went with it, so no reply this time.
            return self._post(notification, key, ref["channel"], maybe_sent, text=text, blocks=blocks, **_NO_UNFURL)
        reply = render.thread_text(notification) if notification.kind in ("repeat", "resolved") else ""
        if reply:  # Slack refuses an empty text (`no_text`): counted a delivery refused for good
            self._post(notification, key + "|reply", ref["channel"], maybe_sent, thread_ts=ref["ts"], text=reply)
        return ref

    def post_digest(self, title: str, lines: list[str]) -> None:
        """The report's digest in the default channel: once, from the report job (not the daemon's worker), so a
        rate limit or a 5xx is waited out here, three tries at most (a retry after a 5xx may post it twice)."""
        text = "\n".join(lines)
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000], "verbatim": True}},
        ]
        for attempt in range(3):
            try:
                self._call(
                    "chat_postMessage", self.config.default_channel, text=f"{title}\n{text}"[:3000], blocks=blocks
                )
                return
            except RetryableError as e:
                if attempt == 2:
                    raise
                time.sleep(min(e.retry_after_s if e.retry_after_s is not None else 2.0**attempt, 30.0))


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
    if status != 200:  # 429 and 5xx: the dispatcher retries, when Slack wants the next try
        return http_status_error(f"slack {method}", status, _header(e.response.headers, "Retry-After"), code or "")
    return RetryableError(message, maybe_acted=False)  # Slack answered that it did not


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
            config.url.get_secret_value(), timeout=math.ceil(config.timeout_s), retry_handlers=[]
        )  # the dispatcher retries, Retry-After capped (slack-sdk slept it out whole, a day, in the worker)
        self._deadline = Deadline("slack webhook", call_deadline_s(config.timeout_s))

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        text, blocks = render.fallback_text(notification), render.blocks(notification, self.config.grafana_url)
        try:
            response = self._deadline.run(lambda: self.client.send(text=text, blocks=blocks))
        except DeliveryError:
            raise
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
            response = self._deadline.run(lambda: self.client.send(text=f"*{title}*\n" + "\n".join(lines)))
        except DeliveryError:
            raise
        except Exception as e:  # the URL is a secret: only the error's kind
            raise RetryableError(f"slack webhook: {type(e).__name__}") from None
        if response.status_code != 200:
            raise http_status_error("slack webhook", response.status_code, None, str(response.body)[:100])
