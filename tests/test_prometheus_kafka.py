"""Real Prometheus (Debian's package) scrapes a real lagwatch watching the real broker: the lag of a known group
comes back through Prometheus's HTTP API, and every query of both Grafana dashboards (panels, annotations and
variables) runs and returns data. Prometheus also evaluates the Helm chart's PrometheusRule on the same metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka import TopicPartition

from lagwatch.config import ClusterConfig, NameFilter, PartitionMetrics, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import free_port
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.helm_tool import helm_binary, template
from tests.live import Recorder

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (make test installs it)"),
]
DASHBOARDS = sorted((Path(__file__).resolve().parents[1] / "grafana" / "dashboards").glob("*.json"))
HELM = helm_binary()


class Stack:
    def __init__(self, base: str, stopped: str, catching_up: str, topics: list[str], metrics_url: str) -> None:
        self.base, self.stopped, self.catching_up, self.topics = base, stopped, catching_up, topics
        self.metrics_url = metrics_url


def _catching_up(bootstrap: str, prefix: str, stop: threading.Event) -> tuple[str, str, threading.Thread]:
    """An assign() group working through a backlog of 3,000 records, 40 a second, while nothing new is produced:
    consumption beats production, so it has a catch-up ETA."""
    topic, group = f"{prefix}-catch-t", f"{prefix}-catch-g"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 3000})
    consumer = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
    kafka_scenario.commit(consumer, {TopicPartition(topic, 0): 10})

    def run() -> None:
        offset = 10
        try:
            while not stop.wait(0.5) and offset < 2900:
                offset += 20
                kafka_scenario.commit(consumer, {TopicPartition(topic, 0): offset})
        finally:
            consumer.close()

    thread = threading.Thread(target=run, name="catching-up", daemon=True)
    thread.start()
    return topic, group, thread


def _chart_rules(path: Path) -> bool:
    """The chart's PrometheusRule with thresholds low enough to fire here; False without helm."""
    if HELM is None:
        return False
    (rule,) = template(
        HELM,
        "--show-only",
        "templates/prometheusrule.yaml",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.lagSeconds.warning=1",
        "--set",
        "prometheusRule.lagSeconds.for=0s",
    )
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return True


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        payload = json.load(response)
    assert payload["status"] == "success", payload
    return payload["data"]["result"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("prom")
    prefix = unique("prom")
    stopped_topic, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30, 1: 12}, {0: 10, 1: 12})
    stop = threading.Event()
    catch_topic, catch_group, catcher = _catching_up(bootstrap, prefix, stop)
    settings = load_settings(
        state_dir=tmp / "state",
        http={"host": "127.0.0.1", "port": 0},
        rules={"stopped": {"window_s": 1}},
        alerts={"group_wait_s": 0},
        lake={"enabled": True, "path": str(tmp / "lake")},  # the lake's panels have series to show
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        poll_interval_s=1,
        groups=NameFilter(include=[f"{prefix}-.*"]),
        # The default granularity (group and topic), and the stopped group's partitions by an override.
        partition_metrics=PartitionMetrics(groups=NameFilter(include=[group])),
    )
    # A notifier, so that the notifier-health panels have series to show.
    daemon = Daemon(settings, clusters={"kafka-test": cluster}, notifiers={"record": Recorder()}).start()
    assert daemon.http is not None
    port = free_port()
    rules = f"rule_files: ['{tmp / 'rules.yml'}']\n" if _chart_rules(tmp / "rules.yml") else ""
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        + rules
        + f"scrape_configs:\n  - job_name: lagwatch\n    static_configs: [{{targets: ['{daemon.http.address}']}}]\n"
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
        yield Stack(base, group, catch_group, [stopped_topic, catch_topic], f"http://{daemon.http.address}/metrics")
    finally:
        stop.set()
        catcher.join(10)
        prom.terminate()
        prom.wait(20)
        daemon.stop()


def _up(base: str) -> bool:
    try:
        return any(r["value"][1] == "1" for r in query(base, 'up{job="lagwatch"}'))
    except OSError:
        return False


def test_prometheus_returns_the_known_lag(stack: Stack) -> None:
    base, group = stack.base, stack.stopped

    def lag() -> list[dict]:
        return query(base, f'lagwatch_group_lag{{group="{group}"}}')

    (series,) = wait_for(lag, timeout=20, what="the group's lag in Prometheus")
    assert series["metric"]["cluster"] == "kafka-test" and float(series["value"][1]) == 20
    by_partition = {
        r["metric"]["partition"]: float(r["value"][1])
        for r in query(base, f'lagwatch_partition_lag{{group="{group}"}}')
    }
    assert by_partition == {"0": 20.0, "1": 0.0}
    # The override adds exactly that group's partitions: the catching-up group has group and topic series only.
    assert query(base, f'lagwatch_partition_lag{{group="{stack.catching_up}"}}') == []
    assert query(base, f'lagwatch_group_topic_lag{{group="{stack.catching_up}"}}') != []
    ends = query(base, 'lagwatch_partition_log_end_offset{cluster="kafka-test"}')
    assert {(r["metric"]["topic"], r["metric"]["partition"]) for r in ends} == {
        (stack.topics[0], "0"),
        (stack.topics[0], "1"),
    }
    alerts = wait_for(lambda: query(base, 'lagwatch_alerts_firing{rule="stopped"}'), timeout=20, what="alert metric")
    assert float(alerts[0]["value"][1]) >= 1


def _exprs(dashboard: dict) -> list[str]:
    panels = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    annotations = [a["expr"] for a in dashboard.get("annotations", {}).get("list", []) if a.get("expr")]
    return panels + annotations


def _substitute(expr: str, stack: Stack) -> str:
    """As Grafana does for multi-value variables on Prometheus: the selected values joined with `|`."""
    return (
        expr.replace("$cluster", "kafka-test")
        .replace("$group", f"{stack.stopped}|{stack.catching_up}")
        .replace("$topic", "|".join(stack.topics))
    )


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_every_dashboard_query_runs_and_returns_data(stack: Stack, path: Path) -> None:
    base = stack.base
    dashboard = json.loads(path.read_text())
    exprs = _exprs(dashboard)
    assert len(exprs) >= 12
    # Range functions (increase over [5m]) need at least two scrapes in their window; rates and the ETA two polls
    # of the catching-up group.
    wait_for(
        lambda: float(query(base, 'count_over_time(up{job="lagwatch"}[5m])')[0]["value"][1]) >= 3,
        timeout=20,
        what="three scrapes",
    )
    wait_for(
        lambda: query(base, f'lagwatch_group_catchup_eta_seconds{{group="{stack.catching_up}"}}'),
        timeout=30,
        what="the catching-up group's ETA",
    )
    if HELM is not None:
        wait_for(lambda: query(base, 'ALERTS{alertstate="firing"}'), timeout=30, what="the chart's rules to fire")
    empty = []
    for expr in exprs:
        if expr.startswith("ALERTS") and HELM is None:
            continue  # the group's Prometheus alerts come from the chart's rules, loaded only when helm is built
        if not query(base, _substitute(expr, stack)):
            empty.append(expr)
    assert empty == []
    # No panel names a metric lagwatch does not export.
    with urllib.request.urlopen(stack.metrics_url, timeout=10) as response:
        exported = set(re.findall(r"^# TYPE (lagwatch_\w+) ", response.read().decode(), re.M))
    named = {m for e in exprs for m in re.findall(r"\blagwatch_\w+", e)}
    assert named and named <= exported, named - exported
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        q = _substitute(variable["query"]["query"], stack)
        label = q.rsplit(",", 1)[1].strip(" )")
        series = q.removeprefix("label_values(").rsplit(",", 1)[0]
        expected = {
            "cluster": {"kafka-test"},
            "group": {stack.stopped, stack.catching_up},
            "topic": set(stack.topics),
        }[label]
        assert {r["metric"][label] for r in query(base, series)} >= expected


@pytest.mark.skipif(HELM is None, reason="helm not built (make test builds it)")
def test_the_charts_prometheus_rule_fires_on_real_metrics(stack: Stack) -> None:
    """The chart's lag alert, on the real lagwatch metrics of the stopped group (threshold lowered to 1 s)."""

    def fired() -> list[dict]:
        return query(
            stack.base, f'ALERTS{{alertname="KafkaConsumerLagHigh", alertstate="firing", group="{stack.stopped}"}}'
        )

    (alert,) = wait_for(fired, timeout=30, what="KafkaConsumerLagHigh for the stopped group")
    assert alert["metric"]["cluster"] == "kafka-test" and alert["metric"]["severity"] == "warning"
    # Its own health rules stay quiet: lagwatch is up and its cluster answers.
    assert query(stack.base, 'ALERTS{alertname=~"LagwatchClusterUnreachable|LagwatchNotificationsStuck"}') == []


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian's prometheus package)")
def test_every_exported_name_follows_prometheus_naming_conventions(stack: Stack) -> None:
    """`promtool check metrics` on the real /metrics of a daemon watching the real broker finds nothing:
    `lagwatch_group_lag_sum` ended in `_sum`, which Prometheus keeps for summaries and histograms."""
    wait_for(lambda: query(stack.base, "lagwatch_group_lag"), timeout=20, what="a poll's series")
    with urllib.request.urlopen(stack.metrics_url, timeout=10) as response:
        body = response.read()
    assert b"lagwatch_group_lag{" in body and b"lagwatch_partition_lag{" in body  # the override's too
    checked = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked
