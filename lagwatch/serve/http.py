"""The HTTP server: the FastAPI app (lagwatch.serve.app) on uvicorn, on its own thread inside the daemon.

What keeps a flood of connections from taking the daemon down (file descriptors are shared with the Kafka clients
and the state files; the thread-per-connection server this replaced ran out at about 1,000 idle connections):
- a request must be read whole (line, headers and body) within `http.request_read_timeout_s` of the connection
  opening or of the previous response: idle connections that never send, and slowloris clients that trickle a
  header byte at a time, are closed then. Between requests, keep-alive lasts KEEP_ALIVE_S;
- at most `http.max_connections` are open (and never more than half the process's open-files limit): a new one
  over the limit evicts the oldest connection that is not being served a request (an idle or a slow one), the
  way nginx reuses its keep-alive connections, so a health probe still gets in during a flood;
- request headers are at most HEADER_MAX_BYTES, bodies at most 64 KiB (lagwatch.serve.app);
- an answer the client does not read is given up after WRITE_TIMEOUT_S with no progress (its connection closed),
  and a connection stuck so counts as not being served, so the limit evicts it: clients that asked and never read
  held their connections and the answers' memory for good, and locked /healthz out (/metrics is also written a
  piece at a time, so such a client holds one piece, not the body).
uvicorn's own `limit_concurrency` counts idle connections too: set below the connection limit, it would answer
503 to /healthz during an idle flood. It is set just above it, as a backstop; the limit itself is the eviction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import select
import socket
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from lagwatch.errors import LagwatchError
from lagwatch.serve.app import create_app
from lagwatch.serve.service import Service

log = logging.getLogger("lagwatch.http")
KEEP_ALIVE_S = 5
WRITE_TIMEOUT_S = 30.0  # an answer whose client reads nothing of it for this long: the connection is closed
HEADER_MAX_BYTES = 16 * 1024
SHUTDOWN_GRACE_S = 2
START_TIMEOUT_S = 10.0
LISTEN_BACKLOG = 1024


def effective_max_connections(configured: int) -> int:
    """At most half the soft open-files limit: the other half is for Kafka sockets, state files and the logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 2))


class Connections:
    """The open connections of one server, oldest first, and why lagwatch closed some. Touched only on the event
    loop's thread; other threads only read the counts (for /metrics)."""

    def __init__(self, max_connections: int, read_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.open: dict[GuardedH11Protocol, None] = {}  # insertion order: oldest first
        self.closed = {"read_timeout": 0, "evicted": 0, "write_timeout": 0}

    @property
    def open_count(self) -> int:
        return len(self.open)

    def admit(self, newcomer: GuardedH11Protocol) -> bool:
        """Registers the newcomer; over the limit, closes the oldest connection that is not being served, or the
        newcomer itself when every other one is busy with a request."""
        self.open[newcomer] = None
        if len(self.open) <= self.max_connections:
            return True
        victim = next((c for c in self.open if c is not newcomer and c.waiting_for_request()), newcomer)
        self.closed["evicted"] += 1
        # Forgotten now, not when its close completes (a later turn of the loop): the accepts of one turn must
        # not all pick the same victim.
        self.forget(victim)
        victim.connections.discard(victim)  # uvicorn's own count (limit_concurrency) too, not at connection_lost
        victim.close_now()
        return victim is not newcomer

    def forget(self, connection: GuardedH11Protocol) -> None:
        self.open.pop(connection, None)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, plus: a deadline to read each request, the connection limit, and JSON for the 400
    that answers a request h11 cannot parse (a Content-Length of -1 or garbage, a header line too long)."""

    connection_guard: Connections  # set on the subclass made for each server (uvicorn owns `connections`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None  # armed while the client reads nothing
        self._requests_started = 0
        self._protocol_error: str | None = None
        parse_next = self.conn.next_event

        def next_event_keeping_the_reason() -> Any:
            try:
                event = parse_next()
            except h11.RemoteProtocolError as e:
                self._protocol_error = str(e)
                raise
            # h11 bounds only a head still arriving (max_incomplete_event_size): one that came whole in a single
            # read (up to 256 KiB) was let through.
            if isinstance(event, h11.Request) and _head_size(event) > HEADER_MAX_BYTES:
                self._protocol_error = f"request line and headers over {HEADER_MAX_BYTES} bytes"
                raise h11.RemoteProtocolError(self._protocol_error, 431)
            return event

        self.conn.next_event = next_event_keeping_the_reason  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if self.connection_guard.admit(self):
            self._arm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection_guard.forget(self)
        self._disarm_read_deadline()
        self._disarm_write_deadline()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The transport's buffer is full: the client is not reading the answer. Given up if it stays so."""
        super().pause_writing()
        self._disarm_write_deadline()
        self._write_deadline = self.loop.call_later(WRITE_TIMEOUT_S, self._write_deadline_passed)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm_write_deadline()

    def _disarm_write_deadline(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_deadline_passed(self) -> None:
        self._write_deadline = None
        if self.transport.is_closing():
            return
        self.connection_guard.closed["write_timeout"] += 1
        self.connection_guard.forget(self)
        self._disarm_read_deadline()
        self.transport.abort()  # its buffered answer dropped at once, not flushed to a client that reads nothing

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_read_deadline()  # the next request on this keep-alive connection gets its own deadline

    def waiting_for_request(self) -> bool:
        """No request of this connection is being served: it is idle, its request is still arriving, or its client
        reads nothing of the answer (a flood of those locked /healthz out)."""
        if self._write_deadline is not None:
            return True
        if self.cycle is not None and not self.cycle.response_complete:
            return False
        return not self._unread_bytes()  # a request already sent (not read yet in a burst of accepts) is no idler

    def _unread_bytes(self) -> bool:
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def close_now(self) -> None:
        self._disarm_read_deadline()
        if self._write_deadline is not None:  # its client reads nothing: a close would wait for it to flush first
            self._disarm_write_deadline()
            self.transport.abort()
        elif not self.transport.is_closing():
            self.transport.close()

    def _arm_read_deadline(self) -> None:
        self._disarm_read_deadline()
        armed_at = self._requests_started = self._requests_started + 1
        self._read_deadline = self.loop.call_later(
            self.connection_guard.read_timeout_s, self._read_deadline_passed, armed_at
        )

    def _disarm_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_deadline_passed(self, armed_at: int) -> None:
        self._read_deadline = None
        if armed_at != self._requests_started or self.transport.is_closing():
            return
        if self.conn.their_state is h11.DONE:  # the request was read whole: the app is on it, no deadline for that
            return
        self.connection_guard.closed["read_timeout"] += 1
        self.close_now()

    def send_400_response(self, msg: str) -> None:
        reason = self._protocol_error or "malformed request"
        body = json.dumps({"error": f"invalid HTTP request: {reason}"}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # h11 is past the point of answering (e.g. mid-response): just close
            pass
        self.close_now()


def _head_size(request: h11.Request) -> int:
    """The request line and headers as sent, give or take the whitespace h11 strips around header values."""
    line = len(request.method) + len(request.target) + len(request.http_version) + 11  # two spaces, "HTTP/", two CRLFs
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers.raw_items())


def _listen(host: str, port: int) -> socket.socket:
    """Bound here rather than by uvicorn: a port in use is a clean error at start, and port 0 tells its number."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise LagwatchError(f"http: cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as e:
        sock.close()
        raise LagwatchError(f"http: cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class HttpServer:
    def __init__(self, service: Service) -> None:
        cfg = service.http_settings
        self.host = cfg.host
        max_connections = effective_max_connections(cfg.max_connections)
        if max_connections < cfg.max_connections:
            log.warning(
                "http.max_connections lowered to half the open-files limit",
                extra={"configured": cfg.max_connections, "used": max_connections},
            )
        self.connections = Connections(max_connections, cfg.request_read_timeout_s)
        self.socket = _listen(cfg.host, cfg.port)
        self.port: int = self.socket.getsockname()[1]
        app = create_app()
        app.state.service = service
        app.state.connections = self.connections
        protocol = type("GuardedH11ProtocolOfServer", (GuardedH11Protocol,), {"connection_guard": self.connections})
        config = uvicorn.Config(
            app,
            http=protocol,
            lifespan="off",
            log_config=None,  # lagwatch's logging (JSON or text, secrets redacted) handles uvicorn's records
            # Per-request warnings (a malformed request) would let any client flood the log: errors only.
            log_level=logging.ERROR,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            limit_concurrency=max_connections + 1,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            h11_max_incomplete_event_size=HEADER_MAX_BYTES,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="lagwatch-http", daemon=True)
        self._failure: BaseException | None = None

    def _serve(self) -> None:
        try:
            # Not the main thread: uvicorn installs no signal handlers; the daemon's own handle SIGTERM.
            self.server.run(sockets=[self.socket])
        except BaseException as e:  # reported by start() and the log, never lost with the thread
            self._failure = e
            log.error("http server stopped with an error", extra={"error": repr(e)})

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> HttpServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise LagwatchError(f"http: the server did not start: {self._failure!r}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.ident is not None:  # started
            self.thread.join(SHUTDOWN_GRACE_S + 3)
            if self.thread.is_alive():
                self.server.force_exit = True
                self.thread.join(2)
        self.socket.close()
