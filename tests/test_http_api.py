"""The HTTP API through FastAPI's TestClient (no broker, no socket): every endpoint, auth, bad bodies and limits,
the generated OpenAPI document, and errors that never show a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.daemon import Daemon
from lagwatch.serve import views
from lagwatch.serve.app import MAX_BODY_BYTES, create_app, openapi_document
from tests.serve_fakes import CLUSTER, SLASHED_GROUP, make_daemon, put_alert

WRITE = "w-Token-51f0"
READ = "r-Token-77aa"


def client_for(daemon: Daemon) -> TestClient:
    app = create_app()
    app.state.service = daemon
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """Polled once by hand, never started: alerts put in its book stay as they are."""
    d = make_daemon(
        tmp_path,
        http={"write_token": WRITE},
        alerts={"silences": [{"matchers": {"group": "legacy-.*"}, "ends_at": "2999-01-01T00:00:00Z"}]},
    )
    d.poll_cluster(CLUSTER)
    yield d
    d.store.close()


@pytest.fixture
def client(daemon: Daemon) -> TestClient:
    return client_for(daemon)


def future(hours: float = 1) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_clusters_and_groups(client: TestClient) -> None:
    (cluster,) = client.get("/api/v1/clusters").json()
    assert cluster["name"] == CLUSTER and cluster["up"] is True and cluster["groups"] == 2 and cluster["polls"] == 1
    assert cluster["exact_clocks"]["state"] == "off"
    assert client.get(f"/api/v1/clusters/{CLUSTER}").json() == cluster
    assert client.get("/api/v1/clusters/nope").json() == {"error": "unknown cluster 'nope'"}
    groups = client.get(f"/api/v1/clusters/{CLUSTER}/groups").json()
    assert sorted((g["group"], g["lag"], g["kind"]) for g in groups) == [
        ("g1", 40, "classic"),
        (SLASHED_GROUP, 5, "classic"),
    ]


def test_group_detail_reaches_a_group_id_with_a_slash_raw_or_encoded(client: TestClient, daemon: Daemon) -> None:
    put_alert(daemon, SLASHED_GROUP)
    for path in (SLASHED_GROUP, SLASHED_GROUP.replace("/", "%2F")):
        response = client.get(f"/api/v1/clusters/{CLUSTER}/groups/{path}")
        assert response.status_code == 200, response.text
        detail = response.json()
        assert detail["group"] == SLASHED_GROUP and [p["lag"] for p in detail["partitions"]] == [5]
        assert [a["rule"] for a in detail["alerts"]] == ["stopped"]
    missing = client.get(f"/api/v1/clusters/{CLUSTER}/groups/none-such")
    assert missing.status_code == 404 and missing.json() == {
        "error": f"unknown group 'none-such' in cluster '{CLUSTER}'"
    }


def test_groups_are_503_until_a_successful_poll(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, fail=True)
    daemon.poll_cluster(CLUSTER)
    response = client_for(daemon).get(f"/api/v1/clusters/{CLUSTER}/groups")
    assert response.status_code == 503 and response.json() == {
        "error": f"cluster '{CLUSTER}' has no successful poll to show"
    }
    (cluster,) = client_for(daemon).get("/api/v1/clusters").json()
    assert cluster["up"] is False and cluster["error"]["detail"] == "connection refused"


def test_alert_filters_and_silence_lifecycle(client: TestClient, daemon: Daemon) -> None:
    put_alert(daemon, "g1")
    put_alert(daemon, "g1", rule="falling_behind", state="pending")
    assert [a["rule"] for a in client.get("/api/v1/alerts", params={"state": "firing"}).json()] == ["stopped"]
    assert client.get("/api/v1/alerts", params={"group": "other"}).json() == []
    body = {"matchers": {"group": "g1", "rule": "stop.*"}, "ends_at": future(), "comment": "deploy"}
    created = client.post("/api/v1/silences", json=body, headers=auth(WRITE))
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["created_by"] == "api" and silence["comment"] == "deploy" and len(silence["id"]) == 12
    ids = [s["id"] for s in client.get("/api/v1/silences").json()]
    assert ids == ["config-0", silence["id"]]
    by_rule = {a["rule"]: a["silenced_by"] for a in client.get("/api/v1/alerts").json()}
    assert by_rule == {"stopped": silence["id"], "falling_behind": None}
    rows = daemon.store.db.db.execute("SELECT body FROM silences WHERE id = ?", (silence["id"],)).fetchall()
    assert len(rows) == 1  # persisted
    assert client.delete(f"/api/v1/silences/{silence['id']}", headers=auth(WRITE)).status_code == 204
    again = client.delete(f"/api/v1/silences/{silence['id']}", headers=auth(WRITE))
    assert again.status_code == 404 and again.json() == {"error": f"unknown silence '{silence['id']}'"}
    config = client.delete("/api/v1/silences/config-0", headers=auth(WRITE))
    assert config.status_code == 409 and "configuration file" in config.json()["error"]


def test_auth(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, http={"read_token": READ})
    client = client_for(daemon)
    assert client.get("/api/v1/clusters").json() == {"error": "missing bearer token"}
    assert client.get("/api/v1/clusters", headers={"Authorization": f"Basic {READ}"}).status_code == 401
    wrong = client.get("/api/v1/alerts", headers=auth("r-Token-77ab"))
    assert wrong.status_code == 401 and wrong.json() == {"error": "invalid bearer token"}
    assert client.get("/api/v1/silences", headers=auth(READ)).status_code == 200
    assert client.get("/api/v1/silences", headers={"Authorization": f"bearer {READ}"}).status_code == 200
    # Without a write token, writes are off whatever the caller sends.
    off = client.post("/api/v1/silences", json={}, headers=auth(READ))
    assert off.status_code == 403 and off.json() == {"error": "write endpoints are disabled: set http.write_token"}
    for open_path in ("/metrics", "/api/v1/openapi.json"):
        assert client.get(open_path).status_code == 200
    assert client.get("/healthz").status_code in (200, 503)  # open; not started here, so 503 (tested elsewhere)


def test_a_json_body_sent_as_a_form_says_which_content_type_is_needed(client: TestClient) -> None:
    """`curl -d '{...}'` sends a form's Content-Type: the answer said only that a JSON object was required."""
    body = b'{"matchers": {"group": "g1"}, "ends_at": "2999-01-01T00:00:00Z"}'
    form = {**auth(WRITE), "Content-Type": "application/x-www-form-urlencoded"}
    answer = client.post("/api/v1/silences", content=body, headers=form)
    assert answer.status_code == 400
    assert "Content-Type: application/json (not application/x-www-form-urlencoded)" in answer.json()["error"]
    json_type = {**auth(WRITE), "Content-Type": "application/json"}
    assert client.post("/api/v1/silences", content=body, headers=json_type).status_code == 201


def test_writes_need_the_write_token(client: TestClient) -> None:
    body = {"matchers": {"group": "g1"}, "ends_at": future()}
    assert client.post("/api/v1/silences", json=body).json() == {"error": "missing bearer token"}
    assert client.post("/api/v1/silences", json=body, headers=auth(READ)).json() == {"error": "invalid bearer token"}
    assert client.delete("/api/v1/silences/abc").status_code == 401


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "body: invalid JSON"),
        (b"[1, 2]", 400, "body: a JSON object is required"),
        (b"", 400, "body: a JSON object is required"),
        ({"ends_at": "2999-01-01T00:00:00Z"}, 400, "matchers: Field required"),
        ({"matchers": {}, "ends_at": "2999-01-01T00:00:00Z"}, 400, "matchers: Dictionary should have at least 1"),
        ({"matchers": {"group": "("}, "ends_at": "2999-01-01T00:00:00Z"}, 400, "matchers: group: invalid regex"),
        # RE2 has no backreferences: a pattern that would backtrack in Python's re is refused, naming the label.
        ({"matchers": {"topic": r"(a)\1"}, "ends_at": "2999-01-01T00:00:00Z"}, 400, "matchers: topic: invalid regex"),
        ({"matchers": {"group": 1}, "ends_at": "2999-01-01T00:00:00Z"}, 400, "matchers.group: Input should be"),
        ({"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00"}, 400, "ends_at: needs a time zone"),
        ({"matchers": {"group": "g"}, "ends_at": "soon"}, 400, "ends_at: Input should be a valid datetime"),
        ({"matchers": {"group": "g"}, "ends_at": "2000-01-01T00:00:00Z"}, 400, "ends_at: must be in the future"),
        ({"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "colour": 1}, 422, "colour: Extra inputs"),
        ({"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "id": "config-7"}, 422, "id: Extra inputs"),
        (
            {"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "created_by": "Config"},
            400,
            "created_by: 'config' is reserved",
        ),
        ({"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "created_by": ""}, 400, "created_by: "),
    ],
)
def test_bad_silences_are_refused_naming_the_field(
    client: TestClient, daemon: Daemon, body: Any, status: int, message: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post("/api/v1/silences", content=raw, headers={**auth(WRITE), "Content-Type": "application/json"})
    assert response.status_code == status and response.json()["error"].startswith(message), response.text
    assert list(response.json()) == ["error"]
    assert [s.id for s in daemon.book.silences] == ["config-0"]  # nothing was created


def test_a_body_over_64_kib_is_413_whether_announced_or_chunked(client: TestClient, daemon: Daemon) -> None:
    big = json.dumps(
        {"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "comment": "x" * MAX_BODY_BYTES}
    ).encode()
    announced = client.post(
        "/api/v1/silences", content=big, headers={**auth(WRITE), "Content-Type": "application/json"}
    )
    assert announced.status_code == 413 and announced.json() == {"error": f"body: over {MAX_BODY_BYTES} bytes"}
    assert announced.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is found while reading
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    chunked = client.post(
        "/api/v1/silences", content=chunks(), headers={**auth(WRITE), "Content-Type": "application/json"}
    )
    assert chunked.status_code == 413 and chunked.json()["error"].startswith("body: over")
    # A GET with a big announced body is refused before any routing.
    assert client.request("GET", "/api/v1/alerts", content=big).status_code == 413
    assert [s.id for s in daemon.book.silences] == ["config-0"]


def test_unknown_paths_and_methods_keep_the_error_shape(client: TestClient) -> None:
    assert client.get("/api/v1/nothing").json() == {"error": "no such endpoint /api/v1/nothing"}
    wrong = client.delete("/api/v1/clusters")
    assert wrong.status_code == 405 and wrong.json() == {"error": "DELETE not allowed on /api/v1/clusters"}


def test_a_bug_costs_one_request_a_json_500_and_is_counted(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("secret-ish internals")

    monkeypatch.setattr(views, "cluster_view", broken)
    response = client.get("/api/v1/clusters")
    assert response.status_code == 500 and response.json() == {"error": "internal error"}
    assert "Traceback" not in response.text and "secret-ish" not in response.text
    assert any(r.name == "lagwatch.http" and r.exc_info for r in caplog.records)  # the traceback is in the log
    assert client.get("/api/v1/silences").status_code == 200  # the next request is fine
    metrics = client.get("/metrics").text
    assert 'lagwatch_internal_errors_total{component="http"} 1' in metrics


def test_metrics_body_is_the_per_poll_render_plus_self_monitoring(client: TestClient, daemon: Daemon) -> None:
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert response.content.startswith(daemon.metrics_body())
    names = {f.name for f in text_string_to_metric_families(response.text)}
    assert {"lagwatch_group_lag", "lagwatch_scheduler_up", "lagwatch_notifier_up"} <= names


def test_metrics_are_one_gzip_stream_for_prometheus_and_plain_text_for_the_rest(
    client: TestClient, daemon: Daemon
) -> None:
    """The body is kept gzipped (about 40 MB of text at 100k group-partitions); a scrape that accepts gzip gets it
    with its own lines appended as one gzip stream (not two members, which some clients stop reading after)."""
    import zlib

    with client.stream("GET", "/metrics", headers={"Accept-Encoding": "gzip"}) as response:
        raw = b"".join(response.iter_raw())
        assert response.headers["content-encoding"] == "gzip"
    stream = zlib.decompressobj(wbits=31)
    text = stream.decompress(raw)
    assert stream.eof and stream.unused_data == b""  # exactly one gzip member, complete
    assert text.startswith(daemon.metrics_body()) and b"lagwatch_scheduler_up" in text
    assert len(raw) < len(text) / 3
    for refused in ("identity", "gzip;q=0", "br"):
        plain = client.get("/metrics", headers={"Accept-Encoding": refused})
        assert "content-encoding" not in plain.headers, refused
        assert plain.content.startswith(daemon.metrics_body())
    assert {f.name for f in text_string_to_metric_families(text.decode())} == {
        f.name for f in text_string_to_metric_families(plain.text)
    }


def test_openapi_is_generated_from_the_models() -> None:
    spec = openapi_document()
    assert spec["openapi"].startswith("3.1")
    assert set(spec["paths"]) == {
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/clusters",
        "/api/v1/clusters/{cluster}",
        "/api/v1/clusters/{cluster}/groups",
        "/api/v1/clusters/{cluster}/groups/{group}",
        "/api/v1/alerts",
        "/api/v1/silences",
        "/api/v1/silences/{silence}",
    }
    schemas = spec["components"]["schemas"]
    create = schemas["SilenceCreate"]
    assert create["additionalProperties"] is False and set(create["required"]) == {"matchers", "ends_at"}
    assert "HTTPValidationError" not in schemas  # FastAPI's 422 shape is never sent: every error is {"error"}
    post = spec["paths"]["/api/v1/silences"]["post"]
    assert post["security"] == [{"HTTPBearer": []}]
    assert spec["paths"]["/api/v1/alerts"]["get"]["security"] == [{"HTTPBearer": []}, {}]  # read token optional
    assert "checkpoint" in schemas["GroupKind"]["enum"]
    served = TestClient(create_app()).get("/api/v1/openapi.json").json()
    assert served == spec


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**63), 2**63)))
def test_numbers_are_written_as_prometheus_client_writes_them(value: float) -> None:
    """The exposition's fast number formatting gives what prometheus-client's floatToGoString gives."""
    from prometheus_client.utils import floatToGoString

    from lagwatch.serve.metrics import _number

    assert _number(value) == (str(value) if type(value) is int else floatToGoString(value))


def test_typos_odd_values_and_slashes_are_errors_not_other_answers(client: TestClient, daemon: Daemon) -> None:
    """`?clster=prod` (a typo) answered every alert, `state=bogus` an empty list, a trailing slash a redirect built
    from the Host header (a link could send a user on to any host), a silence starting after it ends was kept,
    HEAD /metrics was 405, and `gzip;level=1` was answered in plain text."""
    put_alert(daemon, "payments", "lag", "firing")
    assert client.get("/api/v1/alerts", params={"clster": "nope"}).status_code == 400
    assert "clster: no such query parameter" in client.get("/api/v1/alerts?clster=nope").json()["error"]
    assert client.get("/api/v1/alerts", params={"state": "bogus"}).status_code == 400
    slash = client.get("/api/v1/clusters/", headers={"Host": "evil.example"}, follow_redirects=False)
    assert slash.status_code == 404 and "location" not in slash.headers
    body = {"matchers": {"group": "x"}, "starts_at": future(2), "ends_at": future(1)}
    made = client.post("/api/v1/silences", json=body, headers=auth(WRITE))
    assert made.status_code == 400 and "starts_at: must be before ends_at" in made.json()["error"]
    assert client.head("/metrics").status_code == 200
    gz = client.get("/metrics", headers={"Accept-Encoding": "gzip;level=1"})
    assert gz.status_code == 200 and gz.headers.get("content-encoding") == "gzip"
    assert client.get("/metrics", headers={"Accept-Encoding": "gzip;q=0"}).headers.get("content-encoding") is None


def test_ended_api_silences_are_let_go() -> None:
    """The API lists active and future silences only: an ended one could not be found to be deleted, and stayed in
    the book and the state database for good. It is let go an hour after it ended."""
    from lagwatch.alerts import AlertBook, AlertsConfig, Silence
    from lagwatch.alerts.muting import SILENCE_KEPT_S

    book = AlertBook(AlertsConfig())
    book.silences = [
        Silence("api1", {"group": "a"}, ends_at=100.0, created_by="api"),
        Silence("api2", {"group": "b"}, ends_at=10_000.0, created_by="api"),
        Silence("config-0", {"group": "c"}, ends_at=100.0),
    ]
    book.due(100.0 + SILENCE_KEPT_S - 1)
    assert [s.id for s in book.silences] == ["api1", "api2", "config-0"]
    book.due(100.0 + SILENCE_KEPT_S + 1)
    assert [s.id for s in book.silences] == ["api2", "config-0"]  # the configuration's stay with the file
