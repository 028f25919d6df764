"""Real Prometheus (Debian's package) scrapes a real lagwatch watching the real broker: the lag of a known group
comes back through Prometheus's HTTP API, and every query of the Grafana dashboard runs and returns data."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import free_port
from tests import kafka_scenario
from tests.conftest import unique, wait_for

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (make test installs it)"),
]
DASHBOARD = Path(__file__).resolve().parents[1] / "grafana" / "lagwatch.json"


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        payload = json.load(response)
    assert payload["status"] == "success", payload
    return payload["data"]["result"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("prom")
    prefix = unique("prom")
    _, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30, 1: 12}, {0: 10, 1: 12})
    settings = load_settings(
        state_dir=tmp / "state",
        http={"host": "127.0.0.1", "port": 0},
        rules={"stopped": {"window_s": 1}},
        alerts={"group_wait_s": 0},
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap], poll_interval_s=1, groups=NameFilter(include=[f"{prefix}-.*"])
    )
    daemon = Daemon(settings, clusters={"kafka-test": cluster}, notifiers={}).start()
    assert daemon.http is not None
    port = free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: lagwatch\n    static_configs: [{{targets: ['{daemon.http.address}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "wb"),  # noqa: SIM115 - the child owns it
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), timeout=30, what="prometheus to scrape lagwatch")
        yield base, group
    finally:
        prom.terminate()
        prom.wait(20)
        daemon.stop()


def _up(base: str) -> bool:
    try:
        return any(r["value"][1] == "1" for r in query(base, 'up{job="lagwatch"}'))
    except OSError:
        return False


def test_prometheus_returns_the_known_lag(stack: tuple[str, str]) -> None:
    base, group = stack

    def lag() -> list[dict]:
        return query(base, f'lagwatch_group_lag_sum{{group="{group}"}}')

    (series,) = wait_for(lag, timeout=20, what="the group's lag in Prometheus")
    assert series["metric"]["cluster"] == "kafka-test" and float(series["value"][1]) == 20
    by_partition = {
        r["metric"]["partition"]: float(r["value"][1])
        for r in query(base, f'lagwatch_partition_lag{{group="{group}"}}')
    }
    assert by_partition == {"0": 20.0, "1": 0.0}
    alerts = wait_for(lambda: query(base, 'lagwatch_alerts_firing{rule="stopped"}'), timeout=20, what="alert metric")
    assert float(alerts[0]["value"][1]) >= 1


def test_every_dashboard_query_runs_and_the_key_ones_have_data(stack: tuple[str, str]) -> None:
    base, group = stack
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 15
    # Range functions (increase over [5m]) need at least two scrapes in their window.
    wait_for(
        lambda: float(query(base, 'count_over_time(up{job="lagwatch"}[5m])')[0]["value"][1]) >= 3,
        timeout=20,
        what="three scrapes",
    )
    empty = []
    for expr in exprs:
        promql = expr.replace("$cluster", "kafka-test").replace("$group", group)
        if not query(base, promql):
            empty.append(expr)
    # Rates need two polls of history, ETA a catching-up group, expiry a group that can expire: all present here
    # except the ETA of a stopped group, which has none.
    assert [e for e in empty if "catchup_eta" not in e] == []
    for variable in dashboard["templating"]["list"][1:]:
        q = variable["query"]["query"].replace("$cluster", "kafka-test")
        label = q.rsplit(",", 1)[1].strip(" )")
        series = q.removeprefix("label_values(").rsplit(",", 1)[0]
        expected = {group} if label == "group" else {"kafka-test"}
        assert {r["metric"][label] for r in query(base, series)} >= expected
