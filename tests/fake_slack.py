"""A Slack-Web-API-compatible server on loopback (what slack-sdk's base_url points at in the tests).

It records every call, and can be told to answer 429 with Retry-After, 500, a Slack error code (invalid_auth,
message_not_found, ...) for a given method, or slowly, or to be down altogether. With `post_rate_per_s` set it also
enforces a rate limit like Slack's on chat.postMessage (about one message per second per channel, short bursts
allowed): a token bucket per channel, and a 429 with Retry-After (whole seconds, as Slack sends it) when exceeded.
Every message is held to Slack's documented limits (`message_problem`): one over them is refused as Slack refuses it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float
    status: int
    error: str | None = None  # the Slack error code answered with HTTP 200 and "ok": false


@dataclass
class FakeSlack:
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    rate_limit_next: int = 0  # answer the next N calls with 429 + Retry-After
    retry_after: int = 1
    fail_next: int = 0  # answer the next N calls with 500
    delay_s: float = 0.0
    # Per API method ("chat.update"), Slack error codes for its next calls, one per call: {"ok": false, "error"}.
    errors_next: dict[str, list[str]] = field(default_factory=dict)
    token: str = "xoxb-test-Token-42"
    # The next N chat.postMessage calls are carried out, then answered only after `hang_s` (past the client's
    # timeout): Slack acted, lagwatch never heard.
    act_then_hang_next: int = 0
    hang_s: float = 3.0
    # The next N chat.postMessage calls are carried out, then answered 500 (Slack acted, and said it failed).
    act_then_fail_next: int = 0
    # The next N calls are answered 200 with their body sent a byte every `trickle_s` (a proxy or a Slack that
    # hangs mid-answer: each read is quick, the answer never whole).
    trickle_next: int = 0
    trickle_s: float = 1.0
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # channel id -> messages posted
    names: set[str] = field(default_factory=set)  # channels named in posts: the workspace's (conversations.list)
    # chat.postMessage per channel: at most this many per second on average (0: no limit), `post_burst` at once.
    post_rate_per_s: float = 0.0
    post_burst: float = 1.0
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # channel id -> (tokens, at)
    _ts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def delivered(self, method: str | None = None) -> list[Call]:
        """Successful calls that post or change messages (lookups are not deliveries)."""
        with self._lock:
            return [
                c
                for c in self.calls
                if c.status == 200
                and c.error is None
                and (c.method == method if method else not c.method.startswith("conversations."))
            ]

    def start(self) -> FakeSlack:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode()
                if "json" in self.headers.get("Content-Type", ""):
                    args = json.loads(raw or "{}")
                else:
                    args = {k: v[-1] for k, v in parse_qs(raw).items()}
                    if isinstance(args.get("blocks"), str):
                        args["blocks"] = json.loads(args["blocks"])
                method = self.path.rsplit("/", 1)[-1]
                status, body, headers = fake._answer(method, args, self.headers.get("Authorization", ""))
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                trickle = False
                if method == "chat.postMessage" and body.get("ok"):
                    with fake._lock:
                        hang = fake.act_then_hang_next > 0
                        fake.act_then_hang_next -= hang
                        fail = fake.act_then_fail_next > 0
                        fake.act_then_fail_next -= fail
                    if hang:
                        time.sleep(fake.hang_s)
                    if fail:
                        status, body = 500, {"ok": False, "error": "internal_error"}
                with fake._lock:
                    trickle = fake.trickle_next > 0
                    fake.trickle_next -= trickle
                payload = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not trickle:
                    self.wfile.write(payload)
                    return
                for i in range(len(payload)):
                    try:
                        self.wfile.write(payload[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(fake.trickle_s)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _answer(self, method: str, args: dict[str, Any], auth: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            if method == "chat.postMessage" and not str(args.get("channel")).startswith("C"):
                self.names.add(str(args.get("channel")))  # a channel of the workspace, whatever the answer
            if self.rate_limit_next > 0:
                self.rate_limit_next -= 1
                self.calls.append(Call(method, args, time.monotonic(), 429))
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(self.retry_after)}
            if self.fail_next > 0:
                self.fail_next -= 1
                self.calls.append(Call(method, args, time.monotonic(), 500))
                return 500, {"ok": False, "error": "internal_error"}, {}
            if self.errors_next.get(method):
                code = self.errors_next[method].pop(0)
                self.calls.append(Call(method, args, time.monotonic(), 200, code))
                return 200, {"ok": False, "error": code}, {}
            if method == "chat.postMessage" and self.post_rate_per_s > 0:
                wait = self._take_token(_channel_id(args.get("channel")))
                if wait > 0:
                    self.calls.append(Call(method, args, time.monotonic(), 429))
                    retry = str(max(1, math.ceil(wait)))
                    return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": retry}
            if auth != f"Bearer {self.token}":
                self.calls.append(Call(method, args, time.monotonic(), 200, "invalid_auth"))
                return 200, {"ok": False, "error": "invalid_auth"}, {}
            problem = message_problem(args) if method in ("chat.postMessage", "chat.update") else None
            if problem is not None:  # as Slack: the message is refused whole, HTTP 200 and "ok": false
                self.calls.append(Call(method, args, time.monotonic(), 200, problem))
                return 200, {"ok": False, "error": problem, "errors": [problem]}, {}
            self.calls.append(Call(method, args, time.monotonic(), 200))
            if method == "chat.postMessage":
                self._ts += 1
                channel, ts = _channel_id(args.get("channel")), f"1700000000.{self._ts:06d}"
                metadata = args.get("metadata")
                if isinstance(metadata, str):
                    metadata = json.loads(metadata)
                message = {
                    "ts": ts,
                    "at": time.time(),  # the fake's ts are fixed for the tests: conversations.history filters on this
                    "text": args.get("text"),
                    "thread_ts": args.get("thread_ts"),
                    "metadata": metadata,
                }
                self.messages.setdefault(channel, []).append(message)
                return 200, {"ok": True, "channel": channel, "ts": ts}, {}
            if method in ("conversations.history", "conversations.replies"):
                # As Slack: a channel id only (a name is channel_not_found); history lists the channel's messages,
                # newest first, without the replies in threads; replies lists a thread, its parent first, oldest
                # first. `limit` a page (Slack's default 100), the next page by `cursor`.
                channel = str(args.get("channel"))
                if channel not in self.messages and not channel.startswith("C"):
                    return 200, {"ok": False, "error": "channel_not_found"}, {}
                oldest = float(args.get("oldest") or 0)
                posted = self.messages.get(channel, [])
                if method == "conversations.history":
                    found = list(reversed([m for m in posted if m["at"] >= oldest and not m.get("thread_ts")]))
                else:
                    parent = [m for m in posted if m["ts"] == args.get("ts")]
                    replies = [m for m in posted if m.get("thread_ts") == args.get("ts") and m["at"] >= oldest]
                    found = parent + replies
                start, limit = int(args.get("cursor") or 0), int(args.get("limit") or 100)
                page, more = found[start : start + limit], start + limit < len(found)
                body = {"ok": True, "messages": page, "has_more": more}
                body["response_metadata"] = {"next_cursor": str(start + limit) if more else ""}
                return 200, body, {}
            if method == "conversations.list":  # every channel posted to by name, one page
                channels = [{"id": _channel_id(name), "name": name.lstrip("#")} for name in sorted(self.names)]
                return 200, {"ok": True, "channels": channels, "response_metadata": {"next_cursor": ""}}, {}
            if method == "chat.update":
                return 200, {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}, {}
            return 200, {"ok": False, "error": "unknown_method"}, {}

    def _take_token(self, channel: str) -> float:
        """A post to `channel` now: 0 if the channel's bucket had a token (taken), else the seconds until it will."""
        now = time.monotonic()
        tokens, at = self._buckets.get(channel, (self.post_burst, now))
        tokens = min(self.post_burst, tokens + (now - at) * self.post_rate_per_s)
        if tokens >= 1.0:
            self._buckets[channel] = (tokens - 1.0, now)
            return 0.0
        self._buckets[channel] = (tokens, now)
        return (1.0 - tokens) / self.post_rate_per_s


def _channel_id(channel: Any) -> str:
    """Slack answers with the channel's id, whether it was named (#kafka) or given by id (C123...)."""
    name = str(channel)
    return name if name.startswith("C") else f"C{abs(hash(name)) % 10**8:08d}"  # nine characters, as Slack's


# Slack's documented limits (Block Kit reference, chat.postMessage): what a message may hold.
MAX_TEXT = 40_000
_TEXT_LIMITS = {"header": 150, "section": 3000, "context": 3000}


def message_problem(args: dict[str, Any]) -> str | None:
    """The error Slack answers for a message over its limits (`msg_too_long`, `invalid_blocks`, `no_text`), or
    None when Slack takes it."""
    text, blocks = args.get("text"), args.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if not text and not blocks:
        return "no_text"
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
        return "msg_too_long"
    if blocks is None:
        return None
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 50:
        return "invalid_blocks"
    return None if all(_block_ok(b) for b in blocks) else "invalid_blocks"


def _text_ok(obj: Any, limit: int, plain_only: bool = False) -> bool:
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return False
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    return obj.get("type") in kinds and 0 < len(obj["text"]) <= limit


def _block_ok(block: Any) -> bool:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "header":
        return _text_ok(block.get("text"), 150, plain_only=True)
    if kind == "section":
        fields = block.get("fields")
        if "text" not in block and not fields:
            return False
        if "text" in block and not _text_ok(block["text"], 3000):
            return False
        return fields is None or (len(fields) <= 10 and all(_text_ok(f, 2000) for f in fields))
    if kind == "context":
        elements = block.get("elements") or []
        return 0 < len(elements) <= 10 and all(_text_ok(e, 3000) for e in elements)
    if kind == "actions":
        elements = block.get("elements") or []
        return 0 < len(elements) <= 25 and all(
            _text_ok(e.get("text"), 75, plain_only=True) and 0 < len(str(e.get("url", "x"))) <= 3000 for e in elements
        )
    return kind == "divider"
