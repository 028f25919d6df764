"""The HTTP side as an ASGI app (FastAPI): /metrics (rendered once per poll), /healthz, /readyz and the JSON API.

Errors are JSON `{"error": "..."}`: a bad field is named first (`field: why`), 400 for a body that is not a JSON
object or a value that does not validate, 422 for an unknown field, 413 for a body over 64 KiB, then 401, 403,
404, 405, 409 and 503. A bug costs one request a 500 `{"error": "internal error"}`, is logged and counted, and
never shows a traceback to the client. Write endpoints need the configured bearer token; read endpoints of the API
too when a read token is configured. /metrics, /healthz and /readyz stay open.

The app reads what it serves from `app.state.service` (lagwatch.serve.service: the daemon implements it), so the
OpenAPI document can be generated without one.
"""

from __future__ import annotations

import hmac
import logging
import threading
import uuid
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPBearer
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lagwatch import __version__
from lagwatch.alerts import AlertState
from lagwatch.alerts import Silence as BookSilence
from lagwatch.runtime import ClusterRuntime
from lagwatch.serve import health, models, views
from lagwatch.serve.metrics import CONTENT_TYPE, render_self_monitoring
from lagwatch.serve.service import Service

log = logging.getLogger("lagwatch.http")
MAX_BODY_BYTES = 64 * 1024
API = "/api/v1"


class _AnyName(Convertor[str]):
    """A path segment to the end of the path that may hold any character: a group id is any client's choice, `/`
    and line feeds included (Starlette's `path` is `.*`, which stops at a line feed: such a group answered 404)."""

    regex = "(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("any_name", _AnyName())


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class InternalErrors:
    """Exceptions the HTTP side caught and survived (bugs), for lagwatch_internal_errors_total{component="http"}."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self) -> None:
        with self._lock:
            self._count += 1

    @property
    def count(self) -> int:
        return self._count


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _Guard:
    """Outermost: refuses an announced body over the limit before reading a byte of it, stops reading a body that
    turns out bigger (chunked), and turns any exception that got this far into a JSON 500 (logged, counted)."""

    def __init__(self, app: ASGIApp, internal_errors: InternalErrors) -> None:
        self.app = app
        self.internal_errors = internal_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The connection is closed after these answers: the client may still be sending the body we refuse.
        close = {"Connection": "close"}
        lengths = [v for k, v in scope["headers"] if k == b"content-length"]
        if lengths:
            if len(lengths) > 1 or not lengths[0].isdigit():  # h11 already refuses these; another server might not
                await _error(400, "Content-Length: not a non-negative integer", close)(scope, receive, send)
                return
            if int(lengths[0]) > MAX_BODY_BYTES:
                await _error(413, f"body: over {MAX_BODY_BYTES} bytes", close)(scope, receive, send)
                return
        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    # FastAPI passes an HTTPException from the body read on to the app's handler (JSON, 413).
                    raise StarletteHTTPException(413, f"body: over {MAX_BODY_BYTES} bytes", headers=close)
            return message

        response_started = False

        async def send_tracking(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, receive_within_limit, send_tracking)
        except Exception as e:  # a bug must cost one request, never the server, and show no traceback to the client
            self.internal_errors.add()
            log.error("http handler failed", exc_info=True, extra={"path": scope.get("path"), "error": repr(e)})
            if not response_started:
                await _error(500, "internal error")(scope, receive, send)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(x) for x in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    err = exc.errors()[0]
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "json_invalid":
        return _error(400, f"body: invalid JSON ({err.get('ctx', {}).get('error', 'undecodable')})")
    if loc == ("body",):  # no body, or one that is not a JSON object (an array, a string, another content type)
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media and media != "application/json" and not media.endswith("+json"):
            # curl -d sends application/x-www-form-urlencoded: the body was never read as JSON
            return _error(400, f"body: a JSON object is required, sent as Content-Type: application/json (not {media})")
        return _error(400, "body: a JSON object is required")
    message = f"{_field(loc)}: {str(err['msg']).removeprefix('Value error, ')}"
    return _error(422 if kind == "extra_forbidden" else 400, message)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404 and exc.detail == "Not Found":  # no route: our own words, as before
        message = f"no such endpoint {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return _error(exc.status_code, message, dict(exc.headers or {}))


def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _error(exc.status, str(exc))


# --- dependencies ----------------------------------------------------------------------------------------------------

# Declares the bearer scheme in the OpenAPI document; the check itself is ours (its words, constant-time compare).
_bearer = HTTPBearer(auto_error=False, description="http.read_token for reads (when set), http.write_token for writes")


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(_service)]
BearerDeclared = Annotated[Any, Security(_bearer)]


def _check_token(request: Request, expected: str) -> None:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "missing bearer token")
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(401, "invalid bearer token")


def _require_read(request: Request, service: ServiceDep, _: BearerDeclared) -> None:
    token = service.http_settings.read_token
    if token is not None:
        _check_token(request, token.get_secret_value())


def _require_write(request: Request, service: ServiceDep, _: BearerDeclared) -> None:
    token = service.http_settings.write_token
    if token is None:
        raise ApiError(403, "write endpoints are disabled: set http.write_token")
    _check_token(request, token.get_secret_value())


def _known_query_parameters(request: Request) -> None:
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        known |= {p.alias for p in sub.query_params}
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise ApiError(
            400, f"{unknown[0]}: no such query parameter" + (f" (it takes {', '.join(sorted(known))})" if known else "")
        )


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    # "4XX" also keeps FastAPI from documenting its own 422 shape, which this API never sends.
    documented: dict[int | str, dict[str, Any]] = {code: {"model": models.Error} for code in codes}
    return documented | {"4XX": {"model": models.Error, "description": "any other client error"}}


# Reads are open unless http.read_token is set: no credentials ({}) is an alternative to the bearer token, which
# FastAPI already lists (it appends this list to its own).
_OPTIONAL_BEARER: dict[str, Any] = {"security": [{}]}


# --- the app ---------------------------------------------------------------------------------------------------------


def create_app() -> FastAPI:
    internal_errors = InternalErrors()
    app = FastAPI(
        title="lagwatch",
        version=__version__,
        description="Kafka consumer lag: state, alerts, silences.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # the UI pages load scripts from a CDN: not from a monitoring daemon
        redoc_url=None,
        # No redirect for a trailing slash: Starlette built it from the request's Host header, so a link to
        # lagwatch could send a user on to any host.
        redirect_slashes=False,
        # A query parameter no endpoint takes is an error: `?clster=prod` (a typo) answered every alert.
        dependencies=[Depends(_known_query_parameters)],
    )
    app.state.internal_errors = internal_errors
    app.state.persist_streaks = health.PersistStreaks()
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_middleware(_Guard, internal_errors=internal_errors)
    _probes(app)
    _api(app)
    return app


def openapi_document() -> dict[str, Any]:
    return create_app().openapi()


def _liveness_problems(service: Service) -> list[str]:
    return health.liveness_problems(service.scheduler_running(), service.notifiers_supervised())


def _probes(app: FastAPI) -> None:
    # Plain `def`: they take the dispatcher's locks, so they run on the thread pool, never blocking the event loop.
    @app.get(
        "/healthz",
        summary="Alive: the poll scheduler and the notifier workers' supervisor run (never depends on Kafka)",
        response_model=models.Health,
        response_model_exclude_none=True,
        responses={503: {"model": models.Health}},
        tags=["probes"],
    )
    async def healthz(request: Request) -> Any:
        # On the event loop, no lock taken: queued behind nothing on the thread pool (a flood of /metrics
        # scrapes, each piece of which takes a turn of it, held a probe there for seconds).
        problems = _liveness_problems(request.app.state.service)
        if problems:
            return JSONResponse({"status": "failing", "problems": problems}, status_code=503)
        return models.Health(status="ok")

    @app.get(
        "/readyz",
        summary="Ready: every cluster had a successful poll, every notifier worker runs and saves the state, alive",
        response_model=models.Readiness,
        response_model_exclude_none=True,
        responses={503: {"model": models.Readiness}},
        tags=["probes"],
    )
    def readyz(request: Request, service: ServiceDep) -> Any:
        workers = service.worker_health()
        waiting, problems = health.readiness(
            service.runtimes().values(), workers, request.app.state.persist_streaks, service.state_owed()
        )
        problems = _liveness_problems(service) + problems
        body: dict[str, Any] = {"ready": not waiting and not problems, "waiting_for": waiting}
        if problems:
            body["problems"] = problems
        notes = service.state_notes()
        if notes:
            body["notes"] = notes
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    @app.head("/metrics", include_in_schema=False)
    def metrics_head() -> Response:  # HEAD, as monitoring checks ask: the headers of GET, no body
        return Response(media_type=CONTENT_TYPE, headers={"Vary": "Accept-Encoding"})

    @app.get(
        "/metrics",
        summary="Prometheus text exposition: lag figures rendered once per poll, lagwatch's own health per scrape",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE.split(";")[0]: {}}, "description": "text format 0.0.4"}},
        tags=["probes"],
    )
    def metrics(request: Request, service: ServiceDep) -> Response:
        connections = getattr(request.app.state, "connections", None)
        workers = service.worker_health()
        own = render_self_monitoring(
            workers,
            service.scheduler_running(),
            {"http": request.app.state.internal_errors.count}
            | {f"notifier:{name}": h.unexpected_errors for name, h in workers.items()},
            connections.open_count if connections is not None else None,
            connections.closed if connections is not None else {},
        )
        # A piece at a time: a client that does not read holds one piece in its connection, not the whole answer
        # (150 of them took 650 MB with the text of 500 partitions x 40 groups; 41 MB each at 100k).
        gzip = _accepts_gzip(request.headers.get("accept-encoding", ""))  # Prometheus does; the body is kept gzipped
        headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"} if gzip else {"Vary": "Accept-Encoding"}
        return StreamingResponse(service.metrics_chunks(own, gzip), media_type=CONTENT_TYPE, headers=headers)


def _accepts_gzip(header: str) -> bool:
    """RFC 9110 content negotiation, as far as gzip goes: listed (or `*`) without q=0."""
    for item in header.split(","):
        coding, *params = item.split(";")
        if coding.strip().lower() in ("gzip", "*"):
            for param in params:  # only q matters (gzip;level=1 is gzip)
                name, _, value = param.strip().lower().partition("=")
                if name == "q":
                    try:
                        return float(value) > 0
                    except ValueError:
                        return False
            return True
    return False


def _runtime(service: Service, cluster: str) -> ClusterRuntime:
    runtime = service.runtimes().get(cluster)
    if runtime is None:
        raise ApiError(404, f"unknown cluster {cluster!r}")
    return runtime


def _alerts(
    service: Service, cluster: str | None = None, group: str | None = None, state: str | None = None
) -> list[dict[str, Any]]:
    chosen = None if state is None else AlertState(state)
    return [views.alert_view(a, silence) for a, silence in service.alerts(cluster, group, chosen)]


def _api(app: FastAPI) -> None:
    read: list[Any] = [Depends(_require_read)]
    write: list[Any] = [Depends(_require_write)]
    tags: list[str | Any] = ["api"]

    @app.get(
        f"{API}/clusters",
        summary="Clusters and their poll health",
        response_model=list[models.Cluster],
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(401),
        tags=tags,
    )
    def clusters(service: ServiceDep) -> Any:
        return [views.cluster_view(rt) for rt in service.runtimes().values()]

    @app.get(
        f"{API}/clusters/{{cluster}}",
        summary="One cluster",
        response_model=models.Cluster,
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(400, 401, 404),
        tags=tags,
    )
    def cluster(cluster: str, service: ServiceDep) -> Any:
        return views.cluster_view(_runtime(service, cluster))

    @app.get(
        f"{API}/clusters/{{cluster}}/groups",
        summary="Groups of a cluster, as of its last successful poll",
        response_model=list[models.GroupSummary],
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(400, 401, 404, 503),
        tags=tags,
    )
    def groups(cluster: str, service: ServiceDep) -> Any:
        summaries = views.group_summaries(_runtime(service, cluster))
        if summaries is None:
            raise ApiError(503, f"cluster {cluster!r} has no successful poll to show")
        return summaries

    # A group id may hold any character: "/" (sent raw or as %2F; the server decodes both to "/"), a line feed.
    @app.get(
        f"{API}/clusters/{{cluster}}/groups/{{group:any_name}}",
        summary="One group: status, lag, lag seconds, ETA, expiry, partitions, active alerts",
        response_model=models.GroupDetail,
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(400, 401, 404),
        tags=tags,
    )
    def group(cluster: str, group: str, service: ServiceDep) -> Any:
        rt = _runtime(service, cluster)
        detail = views.group_detail(rt, group, _alerts(service, cluster=cluster, group=group))
        if detail is None:
            raise ApiError(404, f"unknown group {group!r} in cluster {cluster!r}")
        return detail

    @app.get(
        f"{API}/alerts",
        summary="Alerts (pending, firing, resolved not yet announced), with the silence that mutes each",
        response_model=list[models.Alert],
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(400, 401),
        tags=tags,
    )
    def alerts(
        service: ServiceDep,
        cluster: Annotated[str | None, Query()] = None,
        group: Annotated[str | None, Query()] = None,
        state: Annotated[Literal["pending", "firing", "resolved"] | None, Query()] = None,
    ) -> Any:
        return _alerts(service, cluster, group, state)

    @app.get(
        f"{API}/silences",
        summary="Active and future silences",
        response_model=list[models.Silence],
        dependencies=read,
        openapi_extra=_OPTIONAL_BEARER,
        responses=_errors(401),
        tags=tags,
    )
    def silences(service: ServiceDep) -> Any:
        return [views.silence_view(s) for s in service.silences()]

    @app.post(
        f"{API}/silences",
        summary="Create a silence; persisted with the alert state",
        status_code=201,
        response_model=models.Silence,
        dependencies=write,
        responses=_errors(400, 401, 403, 413, 422),
        tags=tags,
    )
    def create_silence(body: models.SilenceCreate, service: ServiceDep) -> Any:
        now = service.now()
        if body.ends_at.timestamp() <= now:
            raise ApiError(400, "ends_at: must be in the future")
        if body.starts_at is not None and body.starts_at >= body.ends_at:
            raise ApiError(400, "starts_at: must be before ends_at")
        silence = BookSilence(
            id=uuid.uuid4().hex[:12],  # never "config-...": those ids belong to the configuration file's silences
            matchers=dict(body.matchers),
            ends_at=body.ends_at.timestamp(),
            starts_at=body.starts_at.timestamp() if body.starts_at else None,
            comment=body.comment,
            created_by=body.created_by,
        )
        service.add_silence(silence)
        log.info(
            "silence created", extra={"silence": silence.id, "matchers": silence.matchers, "until": silence.ends_at}
        )
        return views.silence_view(silence)

    @app.delete(
        f"{API}/silences/{{silence}}",
        summary="Delete a silence made through the API",
        status_code=204,
        response_class=Response,
        dependencies=write,
        responses=_errors(400, 401, 403, 404, 409),
        tags=tags,
    )
    def delete_silence(silence: str, service: ServiceDep) -> Response:
        found = [s for s in service.silences(include_ended=True) if s.id == silence]
        if not found:
            raise ApiError(404, f"unknown silence {silence!r}")
        if found[0].created_by == models.CONFIG_SILENCE_CREATOR or silence.startswith(models.CONFIG_SILENCE_ID_PREFIX):
            raise ApiError(409, f"silence {silence!r} comes from the configuration file; remove it there")
        service.delete_silence(silence)
        return Response(status_code=204)
