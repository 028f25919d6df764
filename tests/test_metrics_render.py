"""The per-poll /metrics render: each cluster's series kept from its own last poll, compressed as rendered; the
last evaluation let go before the next step, and the API waiting for the step rather than seeing none."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.alerts import Alert
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot, TopicPartition
from lagwatch.serve import metrics
from lagwatch.serve.app import create_app
from tests.synthetic import group, snapshot


class ManyGroups:
    """`groups` groups of `partitions` partitions each on one topic per cluster, lagging by their index."""

    def __init__(self, topic: str, groups: int, partitions: int) -> None:
        self.tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.groups, self.end = groups, 10_000

    def poll(self) -> ClusterSnapshot:
        self.end += 100
        groups = [group(f"g{i}", committed={tp: self.end - i for tp in self.tps}) for i in range(self.groups)]
        return snapshot(time.time(), groups, {tp: self.end for tp in self.tps})

    def close(self) -> None:
        pass


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    pollers = {"a": ManyGroups("orders", 600, 10), "b": ManyGroups("payments", 3, 2)}
    # Every group-partition's series (none by default): these tests are of the largest render.
    cfg = ClusterConfig(
        bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30, partition_metrics={"groups": {"include": [".*"]}}
    )
    d = Daemon(
        load_settings(state_dir=tmp_path, http={"enabled": False}),
        clusters={"a": cfg, "b": cfg},
        notifiers={},
        poller_factory=lambda name, _: pollers[name],
        reader_factory=None,
    )
    yield d
    d.store.close()


def _series(body: bytes, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    for f in text_string_to_metric_families(body.decode()):
        if f.name == family:
            return {tuple(sorted(s.labels.items())): s.value for s in f.samples}
    return {}


def test_every_partition_of_a_large_cluster_is_exported_once_with_its_lag(daemon: Daemon) -> None:
    """600 groups x 10 partitions: the render compresses the families in pieces as it goes (4,096 lines or more
    at every 256th group)."""
    daemon.poll_cluster("a")
    daemon.poll_cluster("b")
    lag = _series(daemon.metrics_body(), "lagwatch_partition_lag")
    assert len(lag) == 600 * 10 + 3 * 2
    for i in (0, 255, 256, 599):
        for p in range(10):
            labels = (("cluster", "a"), ("group", f"g{i}"), ("partition", str(p)), ("topic", "orders"))
            assert lag[labels] == i
    names = [f.name for f in text_string_to_metric_families(daemon.metrics_body().decode())]
    assert len(names) == len(set(names))  # each family once, both clusters' series in it


def test_a_cluster_stepping_keeps_its_series_from_its_last_poll_in_the_others_renders(daemon: Daemon) -> None:
    daemon.poll_cluster("a")
    daemon.poll_cluster("b")
    before = _series(daemon.metrics_body(), "lagwatch_group_lag_max")
    seen: dict[str, Any] = {}
    step = daemon.pipelines["a"].step

    def step_while_b_polls(snap: ClusterSnapshot) -> Any:
        seen["evaluation"] = daemon.clusters["a"].evaluation  # let go before this step
        daemon.poll_cluster("b")  # as b's thread would, in the middle of a's step
        seen["body"] = daemon.metrics_body()
        return step(snap)

    daemon.pipelines["a"].step = step_while_b_polls  # type: ignore[method-assign]
    daemon.poll_cluster("a")
    assert seen["evaluation"] is None
    during = _series(seen["body"], "lagwatch_group_lag_max")
    assert {k: v for k, v in during.items() if ("cluster", "a") in k} == {
        k: v for k, v in before.items() if ("cluster", "a") in k
    }
    assert sum(1 for k in during if ("cluster", "a") in k) == 600
    # Once stepped, the cached render is the one a fresh render of every cluster gives.
    cached = daemon.metrics_body()
    daemon.render_metrics()
    assert cached == daemon.metrics_body()
    assert metrics.render(daemon.clusters.values(), [], {}).plain().count(b'lagwatch_partition_lag{cluster="a"') == 6000


def test_the_api_waits_for_a_step_under_way_instead_of_answering_without_figures(daemon: Daemon) -> None:
    daemon.poll_cluster("a")
    app = create_app()
    app.state.service = daemon
    client = TestClient(app)
    answers: list[Any] = []
    asking = threading.Thread(target=lambda: answers.append(client.get("/api/v1/clusters/a/groups/g7").json()))
    step = daemon.pipelines["a"].step

    def slow_step(snap: ClusterSnapshot) -> Any:
        asking.start()
        asking.join(0.5)
        assert asking.is_alive()  # waiting for the step: the last evaluation is gone
        return step(snap)

    daemon.pipelines["a"].step = slow_step  # type: ignore[method-assign]
    daemon.poll_cluster("a")
    asking.join(10)
    (answer,) = answers
    assert answer["lag"] == 7 * 10 and answer["max_lag"] == 7
    assert [p["lag"] for p in answer["partitions"]] == [7] * 10


def test_the_daemon_wide_series_published_last_are_the_newest(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two clusters' polls ending at once: a render that waits for the other's assembly must not then publish
    the daemon-wide figures (alerts, notifications, failures) it read before waiting."""
    daemon.poll_cluster("a")
    daemon.poll_cluster("b")
    rendered = threading.Event()
    render_cluster = metrics.render_cluster

    def render_and_say(rt: Any) -> Any:
        parts = render_cluster(rt)
        rendered.set()
        return parts

    monkeypatch.setattr(metrics, "render_cluster", render_and_say)
    with daemon._metrics_lock:  # the other cluster's thread assembling
        polling_a = threading.Thread(target=daemon.render_metrics, args=("a",))
        polling_a.start()
        assert rendered.wait(10)
        time.sleep(0.3)  # a's thread now waits for the lock
        daemon.state_failures += 1  # what the other thread changed meanwhile
    polling_a.join(10)
    failures = _series(daemon.metrics_body(), "lagwatch_state_save_failures")
    assert list(failures.values()) == [1]


def test_firing_alerts_are_counted_per_rule_and_exported_once_per_group() -> None:
    """alerts_firing counts firing alerts per cluster, rule and severity; group_alerts_firing is 1 per firing alert
    of a group, labels escaped; pending and resolved alerts and alerts of no group are not in it."""

    def alert(key: str, group: str | None, rule: str, severity: str, state: str) -> Alert:
        return Alert(key, rule, severity, "c1", group, {}, "", {}, None, 0.0, state, 0.0, 0.0)

    alerts = [
        alert("1", "orders", "lag", "warning", "firing"),
        alert("2", 'we"ird\\name', "lag", "critical", "firing"),
        alert("3", "orders", "stopped", "critical", "firing"),
        alert("4", "refunds", "lag", "warning", "pending"),
        alert("5", "refunds", "stopped", "warning", "resolved"),
        alert("6", None, "cluster_unreachable", "critical", "firing"),
    ]
    body = metrics.assemble([], metrics.render_daemon(alerts, {})).plain()
    per_group = _series(body, "lagwatch_group_alerts_firing")
    assert per_group == {
        (("cluster", "c1"), ("group", "orders"), ("rule", "lag"), ("severity", "warning")): 1.0,
        (("cluster", "c1"), ("group", 'we"ird\\name'), ("rule", "lag"), ("severity", "critical")): 1.0,
        (("cluster", "c1"), ("group", "orders"), ("rule", "stopped"), ("severity", "critical")): 1.0,
    }
    assert _series(body, "lagwatch_alerts_firing") == {
        (("cluster", "c1"), ("rule", "lag"), ("severity", "critical")): 1.0,
        (("cluster", "c1"), ("rule", "lag"), ("severity", "warning")): 1.0,
        (("cluster", "c1"), ("rule", "stopped"), ("severity", "critical")): 1.0,
        (("cluster", "c1"), ("rule", "cluster_unreachable"), ("severity", "critical")): 1.0,
    }


def _granular(tmp_path: Path, partition_metrics: Any = None) -> Daemon:
    """Cluster "b": 3 groups of 2 partitions on `payments`, with the given partition_metrics (default: none)."""
    extra = {} if partition_metrics is None else {"partition_metrics": partition_metrics}
    cfg = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30, **extra)
    d = Daemon(
        load_settings(state_dir=tmp_path, http={"enabled": False}),
        clusters={"b": cfg},
        notifiers={},
        poller_factory=lambda name, _: ManyGroups("payments", 3, 2),
        reader_factory=None,
    )
    d.poll_cluster("b")
    return d


def _names_and_groups(body: bytes, prefix: str) -> set[tuple[str, str, str]]:
    return {
        (s.name, s.labels.get("group", ""), s.labels.get("partition", ""))
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
        if s.name.startswith(prefix)
    }


def test_by_default_groups_and_topics_have_series_and_partitions_none(tmp_path: Path) -> None:
    """KMinion's and kafka-lag-exporter's default: per group and topic. 10,000 groups of 10 partitions were 420,000
    series a scrape, per partition."""
    d = _granular(tmp_path)
    body = d.metrics_body()
    assert _names_and_groups(body, "lagwatch_partition_") == set()
    topic = _series(body, "lagwatch_group_topic_lag")
    assert topic == {(("cluster", "b"), ("group", f"g{i}"), ("topic", "payments")): float(2 * i) for i in range(3)}
    assert _series(body, "lagwatch_group_lag") == {
        (("cluster", "b"), ("group", f"g{i}")): float(2 * i) for i in range(3)
    }
    d.store.close()


def test_a_per_partition_override_adds_exactly_that_groups_partition_series(tmp_path: Path) -> None:
    d = _granular(tmp_path, {"groups": {"include": ["g1"]}})
    series = _names_and_groups(d.metrics_body(), "lagwatch_partition_")
    per_group = {(n, g, p) for n, g, p in series if g}
    # g1's committed offsets and lag (its lag in seconds is not known: one poll), of no other group
    assert per_group == {
        (n, "g1", p) for n in ("lagwatch_partition_committed_offset", "lagwatch_partition_lag") for p in "01"
    }
    # the partitions' own log start and end, for those partitions only
    assert {(n, p) for n, g, p in series if not g} == {
        (n, p) for n in ("lagwatch_partition_log_end_offset", "lagwatch_partition_log_start_offset") for p in ("0", "1")
    }
    d.store.close()


def test_partition_series_are_chosen_by_topic_too_and_the_old_form_still_reads(tmp_path: Path) -> None:
    none = _granular(tmp_path / "a", {"groups": {"include": [".*"]}, "topics": {"exclude": ["payments"]}})
    assert _names_and_groups(none.metrics_body(), "lagwatch_partition_") == set()
    none.store.close()
    old = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], partition_metrics={"include": ["g.*"], "exclude": ["g2"]})
    assert old.partition_metrics.matches("g1", "t") and not old.partition_metrics.matches("g2", "t")
    assert not ClusterConfig(bootstrap_servers=["127.0.0.1:9"]).partition_metrics.matches("g1", "t")
