"""Builds kafka-python's admin client from a cluster's configuration and translates its failures."""

from __future__ import annotations

import importlib
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


def open_admin(name: str, cluster: ClusterConfig) -> Any:
    from kafka import KafkaAdminClient

    try:
        return KafkaAdminClient(**admin_client_options(name, cluster))
    except Exception as e:
        raise translate(name, e) from None


def translate(name: str, error: BaseException) -> ClusterError:
    """One line for a whole-cluster failure: what kind, and the client's own words (never its config)."""
    if isinstance(error, ClusterError):
        return error
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, _AUTH_ERRORS):
        return ClusterError(name, "auth_failed", detail)
    if isinstance(error, Errors.KafkaTimeoutError | Errors.KafkaConnectionError | Errors.NodeNotReadyError):
        return ClusterError(name, "unreachable", f"no broker answered ({detail})")
    if isinstance(error, Errors.RequestTimedOutError):
        return ClusterError(name, "timeout", detail)
    return ClusterError(name, "error", f"{type(error).__name__}: {detail}")
