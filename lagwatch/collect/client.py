"""Builds kafka-python's admin client from a cluster's configuration and translates its failures."""

from __future__ import annotations

import contextlib
import importlib
import socket
import time
from collections import Counter
from typing import Any

import kafka.errors as Errors

from lagwatch.config import ClusterConfig
from lagwatch.errors import ClusterError

_AUTH_ERRORS = (
    Errors.SaslAuthenticationFailedError,
    Errors.AuthorizationError,
)


def admin_client_options(name: str, cluster: ClusterConfig) -> dict[str, Any]:
    """kafka-python options for `cluster`. Holds secrets: never log or print the result."""
    timeout_ms = int(cluster.request_timeout_s * 1000)
    options: dict[str, Any] = {
        "bootstrap_servers": list(cluster.bootstrap_servers),
        "client_id": f"lagwatch-{name}",
        "request_timeout_ms": timeout_ms,
        "bootstrap_timeout_ms": timeout_ms,
        "security_protocol": cluster.security.protocol,
        # Quick reconnects while a broker restarts, without hammering a dead one.
        "reconnect_backoff_max_ms": 5000,
    }
    tls = cluster.security.tls
    if tls is not None:
        options.update(
            ssl_cafile=str(tls.ca_file) if tls.ca_file else None,
            ssl_certfile=str(tls.cert_file) if tls.cert_file else None,
            ssl_keyfile=str(tls.key_file) if tls.key_file else None,
            ssl_password=tls.key_password.get_secret_value() if tls.key_password else None,
            ssl_check_hostname=tls.check_hostname,
        )
    sasl = cluster.security.sasl
    if sasl is not None:
        options["sasl_mechanism"] = sasl.mechanism
        if sasl.username is not None:
            options["sasl_plain_username"] = sasl.username
        if sasl.password is not None:
            options["sasl_plain_password"] = sasl.password.get_secret_value()
        if sasl.mechanism == "GSSAPI":
            options["sasl_kerberos_service_name"] = sasl.kerberos_service_name
            options["sasl_kerberos_domain_name"] = sasl.kerberos_domain_name
        if sasl.oauth_token_provider:
            options["sasl_oauth_token_provider"] = _load_object(sasl.oauth_token_provider)()
    return options


def _load_object(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ClusterError("-", "config", f"cannot load {path!r}: {e}") from None


def _closed_with(manager: Any) -> dict[int, Any]:
    """The second connections to brokers that Wire.side_connection makes (node id -> connection): the manager knows
    only its own, so they are closed when it is."""
    side: dict[int, Any] = {}
    close = manager.close

    def close_with_side(node_id: int | None = None, timeout_ms: int | None = None) -> Any:
        if node_id is None:
            for conn in side.values():
                with contextlib.suppress(Exception):
                    conn.close()
            side.clear()
        return close(node_id=node_id, timeout_ms=timeout_ms)

    manager.close = close_with_side
    return side


def side_connection(manager: Any, node_id: int) -> Any:
    """A second connection to broker `node_id`, kept for the next polls, made as the manager makes its own (TLS,
    SASL and timeouts from the same settings); requests sent on it wait in it while it connects, and fail with it.
    Must be called on the manager's I/O thread."""
    from kafka.net.connection import KafkaConnection

    side: dict[int, Any] = manager.lagwatch_side_connections
    conn = side.get(node_id)
    if conn is not None and not conn.closed:
        return conn
    node = manager.cluster.broker_metadata(node_id)
    if node is None:
        raise Errors.UnknownBrokerIdError(node_id)
    conn = KafkaConnection(
        manager._net, node_id=node_id, broker_version_data=manager.broker_version_data, **manager.config
    )
    side[node_id] = conn
    timeout_at = time.monotonic() + manager.socket_connection_setup_timeout_ms(node_id) / 1000
    # Not reset_backoff_on_connect: the manager's own connection to the broker keeps its own backoff.
    manager._net.call_soon(lambda: manager._connect(node, conn, reset_backoff_on_connect=False, timeout_at=timeout_at))
    return conn


def open_admin(name: str, cluster: ClusterConfig) -> Any:
    from kafka import KafkaAdminClient

    recorder = _LoginFailures()
    try:
        return KafkaAdminClient(**admin_client_options(name, cluster), kafka_client=recorder.net_client)
    except Exception as e:
        recorder.close()
        error = translate(name, recorder.cause(e))
        if error.kind == "unreachable":
            why = why_unreachable(cluster.bootstrap_servers, min(2.0, cluster.request_timeout_s))
            if why:
                error = ClusterError(name, "unreachable", f"{why}; {error.detail}")
        raise error from None


def why_unreachable(servers: list[str], budget_s: float) -> str | None:
    """What one look at the bootstrap servers tells of a bootstrap that failed: a name that does not resolve, a
    port that refuses, one that does not answer, or one that takes the connection but speaks no Kafka to this client
    (another service on that port, or a listener wanting TLS or SASL settings it was not given). They all said
    "no broker answered". One line for all the servers; `budget_s` for all of them."""
    deadline = time.monotonic() + budget_s
    said = []
    for server in servers:
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            said.append(f"{server}: host name does not resolve")
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        family, kind, proto, _, address = infos[0]
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(left)
                probe.connect(address)
            said.append(f"{server}: takes connections but gave no Kafka answer (another service, or TLS/SASL settings)")
        except ConnectionRefusedError:
            said.append(f"{server}: connection refused")
        except TimeoutError:
            said.append(f"{server}: no answer to a connection")
        except OSError as e:
            said.append(f"{server}: {e.strerror or type(e).__name__}")
    return "; ".join(said) or None


class _LoginFailures:
    """kafka-python retries a rejected login until its bootstrap times out, then reports only the timeout.
    This keeps the network client it builds, notes every authentication error of its connections, and stops its
    I/O thread when the admin client never came up.

    A broker that rejects a login sends the error and closes the socket; kafka-python sometimes sees the close first
    and reports a plain disconnect. So any failure during the SASL exchange itself (the broker was reached and
    answered ApiVersions) counts as a rejected login, unless a real authentication error was seen."""

    def __init__(self) -> None:
        self.clients: list[Any] = []
        self.last: BaseException | None = None
        self.during_login: BaseException | None = None

    def net_client(self, **configs: Any) -> Any:
        from kafka.net.compat import KafkaNetClient

        client = KafkaNetClient(**configs)
        manager = client._manager
        get_connection = manager.get_connection

        # Connections made to each broker (node id -> count): a new one means the broker was restarted (or the
        # connection dropped), and the poller reads that broker's settings again (Wire.connections).
        connections: Counter[int] = Counter()

        def watched_get_connection(*args: Any, **kwargs: Any) -> Any:
            conn = get_connection(*args, **kwargs)
            if not getattr(conn, "_lagwatch_watched", False):
                conn._lagwatch_watched = True
                conn.init_future.add_errback(self._note)
                self._watch_login(conn)
                node_id = getattr(conn, "node_id", None)
                if isinstance(node_id, int):
                    connections[node_id] += 1
            return conn

        manager.get_connection = watched_get_connection
        manager.lagwatch_connections = connections
        manager.lagwatch_side_connections = _closed_with(manager)
        self.clients.append(client)
        return client

    def _watch_login(self, conn: Any) -> None:
        authenticate = getattr(conn, "_sasl_authenticate", None)
        if authenticate is None:
            return

        async def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                return await authenticate(*args, **kwargs)
            except Exception as e:
                self.during_login = e
                raise

        conn._sasl_authenticate = watched

    def _note(self, error: BaseException) -> None:
        if isinstance(error, _AUTH_ERRORS):
            self.last = error

    def cause(self, error: BaseException) -> BaseException:
        """The best explanation of a failed bootstrap: a rejected login if there was one, else `error`."""
        if self.last is not None:
            return self.last
        if self.during_login is not None:
            kind = type(self.during_login).__name__
            rejected: BaseException = Errors.SaslAuthenticationFailedError(
                f"connection closed during SASL authentication ({kind})"
            )
            return rejected
        return error

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.close()
                client._manager._net.stop()


def translate(name: str, error: BaseException) -> ClusterError:
    """One line for a whole-cluster failure: what kind, and the client's own words (never its config)."""
    if isinstance(error, ClusterError):
        return error
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, _AUTH_ERRORS):
        return ClusterError(name, "auth_failed", detail)
    # A broker that is down refuses connections: that is "unreachable" whichever layer reports it.
    if isinstance(
        error,
        Errors.KafkaTimeoutError | Errors.KafkaConnectionError | Errors.NodeNotReadyError | ConnectionError,
    ):
        return ClusterError(name, "unreachable", f"no broker answered ({detail})")
    if isinstance(error, Errors.RequestTimedOutError):
        return ClusterError(name, "timeout", detail)
    return ClusterError(name, "error", f"{type(error).__name__}: {detail}")
