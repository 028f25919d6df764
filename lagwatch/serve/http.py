"""One port: /metrics (cached, rendered per poll), /healthz, /readyz and the JSON API (/api/v1/...).

Errors are JSON ({"error": "..."}) with the right 4xx code. Write endpoints need the configured bearer token;
read endpoints of the API too when a read token is configured. /metrics, /healthz and /readyz stay open.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from lagwatch.alerts import Silence, SilenceConfig
from lagwatch.errors import LagwatchError
from lagwatch.serve import views
from lagwatch.serve.metrics import CONTENT_TYPE
from lagwatch.serve.openapi import OPENAPI

if TYPE_CHECKING:
    from lagwatch.daemon import Daemon

log = logging.getLogger("lagwatch.http")
MAX_BODY = 64 * 1024


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


Route = tuple[str, re.Pattern[str], Callable[..., tuple[HTTPStatus, Any]], str]  # method, path, handler, access


class Api:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.routes: list[Route] = [
            ("GET", re.compile(r"/api/v1/clusters"), self.clusters, "read"),
            ("GET", re.compile(r"/api/v1/clusters/(?P<cluster>[^/]+)"), self.cluster, "read"),
            ("GET", re.compile(r"/api/v1/clusters/(?P<cluster>[^/]+)/groups"), self.groups, "read"),
            ("GET", re.compile(r"/api/v1/clusters/(?P<cluster>[^/]+)/groups/(?P<group>[^/]+)"), self.group, "read"),
            ("GET", re.compile(r"/api/v1/alerts"), self.alerts, "read"),
            ("GET", re.compile(r"/api/v1/silences"), self.silences, "read"),
            ("POST", re.compile(r"/api/v1/silences"), self.create_silence, "write"),
            ("DELETE", re.compile(r"/api/v1/silences/(?P<silence>[^/]+)"), self.delete_silence, "write"),
            ("GET", re.compile(r"/api/v1/openapi.json"), lambda **_: (HTTPStatus.OK, OPENAPI), "open"),
        ]

    def _runtime(self, cluster: str) -> Any:
        runtime = self.daemon.clusters.get(cluster)
        if runtime is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"unknown cluster {cluster!r}")
        return runtime

    def clusters(self, **_: Any) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, [views.cluster_view(rt) for rt in self.daemon.clusters.values()]

    def cluster(self, cluster: str, **_: Any) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, views.cluster_view(self._runtime(cluster))

    def groups(self, cluster: str, **_: Any) -> tuple[HTTPStatus, Any]:
        rt = self._runtime(cluster)
        if rt.latest is None or not rt.latest.ok:
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, f"cluster {cluster!r} has no successful poll to show")
        return HTTPStatus.OK, [views.group_summary(rt, g.group_id) for g in rt.latest.groups]

    def group(self, cluster: str, group: str, **_: Any) -> tuple[HTTPStatus, Any]:
        rt = self._runtime(cluster)
        alerts = self._alerts(cluster=cluster, group=group)
        detail = views.group_detail(rt, group, alerts)
        if detail is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"unknown group {group!r} in cluster {cluster!r}")
        return HTTPStatus.OK, detail

    def _alerts(
        self, cluster: str | None = None, group: str | None = None, state: str | None = None
    ) -> list[dict[str, Any]]:
        now = self.daemon.clock()
        with self.daemon.book_lock:
            return [
                views.alert_view(a, self.daemon.book.silenced(a, now))
                for a in sorted(self.daemon.book.alerts.values(), key=lambda a: (a.cluster, a.group or "", a.rule))
                if (cluster is None or a.cluster == cluster) and (group is None or a.group == group)
                and (state is None or a.state == state)
            ]  # fmt: skip

    def alerts(self, query: dict[str, str], **_: Any) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, self._alerts(query.get("cluster"), query.get("group"), query.get("state"))

    def silences(self, **_: Any) -> tuple[HTTPStatus, Any]:
        now = self.daemon.clock()
        with self.daemon.book_lock:
            return HTTPStatus.OK, [views.silence_view(s) for s in self.daemon.book.silences if s.ends_at > now]

    def create_silence(self, body: Any, **_: Any) -> tuple[HTTPStatus, Any]:
        if not isinstance(body, dict):
            raise ApiError(HTTPStatus.BAD_REQUEST, "body: a JSON object is required")
        created_by = body.pop("created_by", "api")
        try:
            config = SilenceConfig.model_validate(body)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "body"
            raise ApiError(
                HTTPStatus.BAD_REQUEST, f"{where}: {str(err['msg']).removeprefix('Value error, ')}"
            ) from None
        now = self.daemon.clock()
        if config.ends_at.timestamp() <= now:
            raise ApiError(HTTPStatus.BAD_REQUEST, "ends_at: must be in the future")
        silence = Silence(
            id=uuid.uuid4().hex[:12],
            matchers=dict(config.matchers),
            ends_at=config.ends_at.timestamp(),
            starts_at=config.starts_at.timestamp() if config.starts_at else None,
            comment=config.comment,
            created_by=str(created_by)[:100] or "api",
        )
        with self.daemon.book_lock:
            self.daemon.book.silences.append(silence)
            self.daemon.save_alerts()
        log.info(
            "silence created", extra={"silence": silence.id, "matchers": silence.matchers, "until": silence.ends_at}
        )
        return HTTPStatus.CREATED, views.silence_view(silence)

    def delete_silence(self, silence: str, **_: Any) -> tuple[HTTPStatus, Any]:
        with self.daemon.book_lock:
            found = [s for s in self.daemon.book.silences if s.id == silence]
            if not found:
                raise ApiError(HTTPStatus.NOT_FOUND, f"unknown silence {silence!r}")
            if found[0].created_by == "config":
                raise ApiError(
                    HTTPStatus.CONFLICT, f"silence {silence!r} comes from the configuration file; remove it there"
                )
            self.daemon.book.silences = [s for s in self.daemon.book.silences if s.id != silence]
            self.daemon.save_alerts()
        return HTTPStatus.NO_CONTENT, None


def _handler(daemon: Daemon, api: Api) -> type[BaseHTTPRequestHandler]:
    http = daemon.settings.http

    class Handler(BaseHTTPRequestHandler):
        server_version = "lagwatch"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http " + format % args)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            path = url.path.rstrip("/") or "/"
            try:
                if method == "GET" and path == "/metrics":
                    return self._send(HTTPStatus.OK, daemon.metrics_body(), CONTENT_TYPE)
                if method == "GET" and path == "/healthz":
                    return self._json(HTTPStatus.OK, {"status": "ok"})
                if method == "GET" and path == "/readyz":
                    waiting = [rt.name for rt in daemon.clusters.values() if rt.last_success is None]
                    status = HTTPStatus.SERVICE_UNAVAILABLE if waiting else HTTPStatus.OK
                    return self._json(status, {"ready": not waiting, "waiting_for": waiting})
                self._json(*self._api(method, path, url.query))
            except ApiError as e:
                self._json(e.status, {"error": str(e)})
            except Exception as e:  # a bug must cost one request, never the server
                log.error("http handler failed", extra={"path": path, "error": repr(e)})
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})

        def _api(self, method: str, path: str, query: str) -> tuple[HTTPStatus, Any]:
            allowed = []
            for route_method, pattern, handler, access in api.routes:
                match = pattern.fullmatch(path)
                if match is None:
                    continue
                allowed.append(route_method)
                if route_method != method:
                    continue
                self._authorize(access)
                args = {k: unquote(v) for k, v in match.groupdict().items()}
                body = self._body() if method == "POST" else None
                q = {k: v[-1] for k, v in parse_qs(query).items()}
                return handler(**args, body=body, query=q)
            if allowed:
                raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed on {path}")
            raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {path}")

        def _authorize(self, access: str) -> None:
            token = http.write_token if access == "write" else http.read_token if access == "read" else None
            if access == "write" and token is None:
                raise ApiError(HTTPStatus.FORBIDDEN, "write endpoints are disabled: set http.write_token")
            if token is None:
                return
            given = self.headers.get("Authorization", "")
            if not given.startswith("Bearer "):
                raise ApiError(HTTPStatus.UNAUTHORIZED, "missing bearer token")
            if not hmac.compare_digest(given.removeprefix("Bearer ").encode(), token.get_secret_value().encode()):
                raise ApiError(HTTPStatus.UNAUTHORIZED, "invalid bearer token")

        def _body(self) -> Any:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise ApiError(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
            if length > MAX_BODY:
                raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
            try:
                return json.loads(self.rfile.read(length) or b"null")
            except ValueError as e:
                raise ApiError(HTTPStatus.BAD_REQUEST, f"body: invalid JSON ({e})") from None

        def _json(self, status: HTTPStatus, payload: Any) -> None:
            if status == HTTPStatus.NO_CONTENT:
                return self._send(status, b"", None)
            self._send(status, json.dumps(payload, default=_json_default).encode(), "application/json")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str | None) -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


class HttpServer:
    def __init__(self, daemon: Daemon) -> None:
        cfg = daemon.settings.http
        self.daemon_host = cfg.host
        try:
            self.server = ThreadingHTTPServer((cfg.host, cfg.port), _handler(daemon, Api(daemon)))
        except OSError as e:
            raise LagwatchError(f"http: cannot listen on {cfg.host}:{cfg.port}: {e.strerror}") from None
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="lagwatch-http", daemon=True)

    @property
    def address(self) -> str:
        return f"{self.daemon_host}:{self.server.server_port}"

    def start(self) -> HttpServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
