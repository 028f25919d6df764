"""The exporter and the JSON API of a daemon watching a real broker: every endpoint, and bad input."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.config import ClusterConfig, NameFilter, PartitionMetrics, load_settings
from lagwatch.daemon import Daemon
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.http_client import call
from tests.live import Recorder

pytestmark = pytest.mark.kafka
WRITE_TOKEN = "w-Token-8c1e5"


@pytest.fixture(scope="module")
def served(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str, str]]:
    prefix = unique("api")
    _, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 40, 1: 10}, {0: 15, 1: 10})
    settings = load_settings(
        state_dir=tmp_path_factory.mktemp("state"),
        rules={"stopped": {"window_s": 1}, "expiry": {"enabled": False}},
        alerts={"group_wait_s": 0},
        http={"host": "127.0.0.1", "port": 0, "write_token": WRITE_TOKEN},
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        poll_interval_s=1,
        groups=NameFilter(include=[f"{prefix}-.*"]),
        partition_metrics=PartitionMetrics(groups=NameFilter()),  # every group's partitions (none by default)
    )
    daemon = Daemon(settings, clusters={"test": cluster}, notifiers={"record": Recorder()}).start()
    assert daemon.http is not None
    base = f"http://{daemon.http.address}"
    wait_for(
        lambda: any(a.rule == "stopped" and a.state == "firing" for a in daemon.book.alerts.values()),
        timeout=20,
        what="the stopped alert",
    )
    yield daemon, base, group
    daemon.stop()


def test_health_ready_and_clusters(served: tuple[Daemon, str, str]) -> None:
    _, base, _ = served
    assert call(base, "GET", "/healthz") == (200, {"status": "ok"})
    assert call(base, "GET", "/readyz") == (200, {"ready": True, "waiting_for": []})
    status, clusters = call(base, "GET", "/api/v1/clusters")
    assert status == 200 and [(c["name"], c["up"]) for c in clusters] == [("test", True)]
    assert call(base, "GET", "/api/v1/clusters/test")[1]["groups"] == 1
    assert call(base, "GET", "/api/v1/clusters/nope") == (404, {"error": "unknown cluster 'nope'"})


def test_groups_and_group_detail(served: tuple[Daemon, str, str]) -> None:
    _, base, group = served
    status, groups = call(base, "GET", "/api/v1/clusters/test/groups")
    assert status == 200 and [(g["group"], g["lag"], g["state"], g["kind"]) for g in groups] == [
        (group, 25, "Empty", "classic")
    ]
    status, detail = call(base, "GET", f"/api/v1/clusters/test/groups/{group}")
    assert status == 200
    assert [(p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"]) for p in detail["partitions"]] == [
        (0, 15, 40, 25),
        (1, 10, 10, 0),
    ]
    assert [a["rule"] for a in detail["alerts"]] == ["stopped"] and detail["alerts"][0]["state"] == "firing"
    assert call(base, "GET", "/api/v1/clusters/test/groups/none-such")[0] == 404


def test_alerts_and_silences_lifecycle(served: tuple[Daemon, str, str]) -> None:
    daemon, base, group = served
    status, alerts = call(base, "GET", f"/api/v1/alerts?group={group}&state=firing")
    assert status == 200 and [a["rule"] for a in alerts] == ["stopped"] and alerts[0]["silenced_by"] is None
    ends = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = {"matchers": {"group": group}, "ends_at": ends, "comment": "deploy"}
    assert call(base, "POST", "/api/v1/silences", body) == (401, {"error": "missing bearer token"})
    assert call(base, "POST", "/api/v1/silences", body, token="wrong") == (401, {"error": "invalid bearer token"})
    status, created = call(base, "POST", "/api/v1/silences", body, token=WRITE_TOKEN)
    assert status == 201 and created["matchers"] == {"group": group} and created["comment"] == "deploy"
    assert [s["id"] for s in call(base, "GET", "/api/v1/silences")[1]] == [created["id"]]
    assert call(base, "GET", f"/api/v1/alerts?group={group}")[1][0]["silenced_by"] == created["id"]
    rows = daemon.store.db.db.execute("SELECT body FROM silences WHERE id = ?", (created["id"],)).fetchall()
    assert len(rows) == 1  # persisted
    assert call(base, "DELETE", f"/api/v1/silences/{created['id']}", token=WRITE_TOKEN) == (204, None)
    assert call(base, "DELETE", f"/api/v1/silences/{created['id']}", token=WRITE_TOKEN)[0] == 404
    assert call(base, "GET", "/api/v1/silences")[1] == []


@pytest.mark.parametrize(
    ("body", "raw", "message"),
    [
        (None, b"{not json", "body: invalid JSON"),
        ([1, 2], None, "body: a JSON object is required"),
        ({"ends_at": "2999-01-01T00:00:00Z"}, None, "matchers: Field required"),
        ({"matchers": {"group": "("}, "ends_at": "2999-01-01T00:00:00Z"}, None, "matchers: group: invalid regex"),
        ({"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00"}, None, "ends_at: needs a time zone"),
        ({"matchers": {"group": "g"}, "ends_at": "2000-01-01T00:00:00Z"}, None, "ends_at: must be in the future"),
    ],
)
def test_malformed_silences_are_400_naming_the_field(
    served: tuple[Daemon, str, str], body: object, raw: bytes | None, message: str
) -> None:
    _, base, _ = served
    status, payload = call(base, "POST", "/api/v1/silences", body, token=WRITE_TOKEN, raw=raw)
    assert status == 400 and payload["error"].startswith(message), payload


def test_unknown_silence_fields_are_422_naming_the_field(served: tuple[Daemon, str, str]) -> None:
    _, base, _ = served
    body = {"matchers": {"group": "g"}, "ends_at": "2999-01-01T00:00:00Z", "colour": 1}
    status, payload = call(base, "POST", "/api/v1/silences", body, token=WRITE_TOKEN)
    assert status == 422 and payload == {"error": "colour: Extra inputs are not permitted"}


def test_unknown_paths_and_methods(served: tuple[Daemon, str, str]) -> None:
    _, base, _ = served
    assert call(base, "GET", "/api/v1/nothing") == (404, {"error": "no such endpoint /api/v1/nothing"})
    assert call(base, "DELETE", "/api/v1/clusters")[0] == 405
    status, spec = call(base, "GET", "/api/v1/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.") and "/api/v1/silences" in spec["paths"]


def test_metrics_carry_the_lag_and_no_secrets(served: tuple[Daemon, str, str]) -> None:
    _, base, group = served
    status, text = call(base, "GET", "/metrics")
    assert status == 200 and WRITE_TOKEN not in text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert all(math.isfinite(v) for v in samples.values())
    assert all(
        dict(labels).get("cluster") == "test"
        for (name, labels) in samples
        # lagwatch's own health is the process's, not a cluster's
        if not name.startswith(
            (
                "lagwatch_notification",
                "lagwatch_notifier_",
                "lagwatch_scheduler_",
                "lagwatch_internal_",
                "lagwatch_http_",
                "lagwatch_state_",
                "lagwatch_clock_",
            )
        )
    )
    g = (("cluster", "test"), ("group", group))
    assert samples[("lagwatch_group_lag", g)] == 25 and samples[("lagwatch_group_lag_max", g)] == 25
    assert samples[("lagwatch_group_members", g)] == 0
    assert samples[("lagwatch_cluster_up", (("cluster", "test"),))] == 1
    assert (
        samples[("lagwatch_alerts_firing", (("cluster", "test"), ("rule", "stopped"), ("severity", "critical")))] == 1
    )
    topic = f"{group[:-2]}-t"
    assert samples[("lagwatch_partition_lag", (*g, ("partition", "0"), ("topic", topic)))] == 25
    assert (
        samples[("lagwatch_partition_log_end_offset", (("cluster", "test"), ("partition", "0"), ("topic", topic)))]
        == 40
    )
    assert samples[("lagwatch_cluster_poll_requests", (("api", "OffsetFetch"), ("cluster", "test")))] == 1


def test_read_token_and_readiness_without_a_successful_poll(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    settings = load_settings(state_dir=tmp_path, http={"host": "127.0.0.1", "port": 0, "read_token": "r-Token-1"})
    daemon = Daemon(
        settings, clusters={"dead": ClusterConfig(bootstrap_servers=[dead], request_timeout_s=1)}, notifiers={}
    ).start()
    try:
        assert daemon.http is not None
        base = f"http://{daemon.http.address}"
        assert call(base, "GET", "/healthz")[0] == 200  # alive, whatever Kafka does
        assert call(base, "GET", "/readyz") == (503, {"ready": False, "waiting_for": ["dead"]})
        assert call(base, "GET", "/api/v1/clusters")[0] == 401
        status, clusters = call(base, "GET", "/api/v1/clusters", token="r-Token-1")
        assert status == 200 and clusters[0]["name"] == "dead"
        assert call(base, "POST", "/api/v1/silences", {}, token="r-Token-1")[0] == 403  # no write token configured
        wait_for(
            lambda: call(base, "GET", "/api/v1/clusters/dead", token="r-Token-1")[1]["error"],
            timeout=15,
            what="poll error",
        )
        assert call(base, "GET", "/api/v1/clusters/dead/groups", token="r-Token-1")[0] == 503
    finally:
        daemon.stop()


def test_series_of_a_vanished_group_disappear_at_the_next_render() -> None:
    from lagwatch.history import ClusterHistory
    from lagwatch.rules import RuleResolver, RulesConfig, evaluate
    from lagwatch.runtime import ClusterRuntime
    from lagwatch.serve import metrics
    from tests.synthetic import TP, group, snapshot

    history, resolver = ClusterHistory("c"), RuleResolver(RulesConfig())
    runtime = ClusterRuntime("c", ClusterConfig(bootstrap_servers=["127.0.0.1:9"]), None, history)

    def render(groups: list) -> str:  # type: ignore[type-arg]
        snap = snapshot(len(history.groups) * 30.0 + 30, groups, {TP: 50})
        history.observe(snap)
        runtime.latest, runtime.evaluation = snap, evaluate(snap, history, resolver, {})
        return metrics.render([runtime], [], {}).plain().decode()

    both = render([group("kept", committed={TP: 10}), group("gone", committed={TP: 20})])
    assert 'group="gone"' in both and 'group="kept"' in both
    after = render([group("kept", committed={TP: 10})])
    assert 'group="gone"' not in after and 'lagwatch_group_lag{cluster="c",group="kept"} 40' in after
