"""lagwatch's Grafana dashboards as code (grafana-foundation-sdk, which types every panel), and their provisioning.

`python grafana/dashboards.py` writes grafana/dashboards/*.json, the same files into the Helm chart
(deploy/helm/lagwatch/dashboards/, for the Grafana sidecar ConfigMap), and grafana/provisioning/. The tests check
that the committed files are what this script generates, and run every panel's query on a real Prometheus scraping
a real lagwatch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

ROOT = Path(__file__).resolve().parents[1]
OUT_DIRS = (ROOT / "grafana" / "dashboards", ROOT / "deploy" / "helm" / "lagwatch" / "dashboards")
PROVISIONING = ROOT / "grafana" / "provisioning"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Every selector of a panel: the dashboard's variables ("All" is ".*").
SEL = 'cluster=~"$cluster", group=~"$group"'
SEL_TOPIC = 'cluster=~"$cluster", group=~"$group", topic=~"$topic"'
CLUSTER = 'cluster=~"$cluster"'
Panel = timeseries.Panel | stat.Panel | table.Panel


def q(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        query = query.legend_format(legend)
    if instant:
        query = query.instant().format(PromQueryFormat.TABLE)
    return query


def ts(title: str, unit: str, *queries: prometheus.Dataquery, w: int = 12, h: int = 8, desc: str = "") -> Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(w)
        .height(h)
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
    )
    if desc:
        panel = panel.description(desc)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def tbl(
    title: str, unit: str, query: prometheus.Dataquery, w: int = 12, h: int = 8, desc: str = "", sort_desc: bool = True
) -> Panel:
    panel = (
        table.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(w)
        .height(h)
        .with_target(query)
        .sort_by([cb.TableSortByFieldState().display_name("Value").desc(sort_desc)])
        .with_transformation(_organize())
    )
    return panel.description(desc) if desc else panel


def _organize() -> DataTransformerConfig:
    return DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}})


def st(title: str, unit: str, *queries: prometheus.Dataquery, w: int = 6, h: int = 6, desc: str = "") -> Panel:
    panel = (
        stat.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(w)
        .height(h)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .graph_mode(common.BigValueGraphMode.AREA)
    )
    if desc:
        panel = panel.description(desc)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def variables(topic: bool = True) -> list[Any]:
    out: list[Any] = [db.DatasourceVariable("datasource").label("Prometheus").type("prometheus")]

    def query_var(name: str, label: str, query: str) -> Any:
        return (
            db.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query({"query": query, "refId": name})
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
        )

    out.append(query_var("cluster", "Cluster", "label_values(lagwatch_cluster_up, cluster)"))
    out.append(query_var("group", "Consumer group", 'label_values(lagwatch_group_members{cluster=~"$cluster"}, group)'))
    if topic:
        out.append(
            query_var(
                "topic",
                "Topic",
                'label_values(lagwatch_group_topic_lag{cluster=~"$cluster", group=~"$group"}, topic)',
            )
        )
    return out


def base(title: str, uid: str, description: str) -> db.Dashboard:
    d = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["kafka", "lagwatch"])
        .timezone("utc")
        .time("now-6h", "now")
        .refresh("30s")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .link(
            db.DashboardLink("lagwatch")
            .type(DashboardLinkType.DASHBOARDS)
            .tags(["lagwatch"])
            .as_dropdown(False)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for v in variables():
        d = d.with_variable(v)
    return d


def overview() -> db.Dashboard:
    d = base(
        "lagwatch: overview",
        "lagwatch-overview",
        "Every consumer group lagwatch watches: the worst first, offsets about to expire, firing alerts, and "
        "lagwatch's own health (polls and notifications).",
    )
    d = d.with_row(db.Row("Consumer groups"))
    d = d.with_panel(
        tbl(
            "Groups ranked by lag (seconds)",
            "s",
            q(f"topk(20, max by (cluster, group) (lagwatch_group_lag_seconds_max{{{SEL}}}))", instant=True),
            desc="Seconds behind, worst partition of each group (the time the next record to consume was produced).",
        )
    )
    d = d.with_panel(
        tbl(
            "Groups ranked by lag (records)",
            "short",
            q(f"topk(20, sum by (cluster, group) (lagwatch_group_topic_lag{{{SEL_TOPIC}}}))", instant=True),
            desc="Records behind, summed over the selected topics' partitions.",
        )
    )
    d = d.with_panel(
        tbl(
            "Nearest offset expiry",
            "s",
            q(f"bottomk(20, lagwatch_group_offset_expiry_seconds{{{SEL}}})", instant=True),
            desc="Time until committed offsets can expire (offsets.retention.minutes, per group kind). After "
            "that a restarted consumer falls back to auto.offset.reset.",
            sort_desc=False,
        )
    )
    d = d.with_panel(
        tbl(
            "Firing alerts by rule",
            "short",
            q(f"sum by (cluster, rule, severity) (lagwatch_alerts_firing{{{CLUSTER}}})", instant=True),
        )
    )
    d = d.with_panel(
        ts(
            "Max lag (seconds)",
            "s",
            q(f"max by (cluster, group) (lagwatch_group_lag_seconds_max{{{SEL}}})", "{{cluster}} / {{group}}"),
            w=24,
        )
    )
    d = d.with_row(db.Row("Poll health"))
    d = d.with_panel(st("Clusters up", "short", q(f"lagwatch_cluster_up{{{CLUSTER}}}", "{{cluster}}"), w=4))
    d = d.with_panel(
        ts(
            "Seconds since the last successful poll",
            "s",
            q(f"time() - lagwatch_cluster_last_success_timestamp_seconds{{{CLUSTER}}}", "{{cluster}}"),
            w=10,
        )
    )
    d = d.with_panel(
        ts("Poll duration", "s", q(f"lagwatch_cluster_poll_duration_seconds{{{CLUSTER}}}", "{{cluster}}"), w=10)
    )
    d = d.with_panel(
        ts(
            "Poll errors and skipped polls (per 5m)",
            "short",
            q(f"increase(lagwatch_cluster_poll_failures_total{{{CLUSTER}}}[5m])", "{{cluster}} failed"),
            q(f"increase(lagwatch_cluster_polls_skipped_total{{{CLUSTER}}}[5m])", "{{cluster}} skipped", "B"),
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            "Kafka requests per poll",
            "short",
            q(f"sum by (cluster, api) (lagwatch_cluster_poll_requests{{{CLUSTER}}})", "{{cluster}} {{api}}"),
            w=8,
            desc="Flat whatever the number of groups: one request per coordinator and per partition leader.",
        )
    )
    d = d.with_panel(
        tbl(
            "Exact clocks (__consumer_offsets reader)",
            "short",
            q(f"lagwatch_exact_clocks_state{{{CLUSTER}}} == 1", instant=True),
            w=8,
        )
    )
    d = d.with_row(db.Row("Notifications"))
    d = d.with_panel(st("Queued", "short", q("lagwatch_notifications_queued", "queued"), w=8))
    d = d.with_panel(
        ts(
            "Delivered and failed attempts (per 5m)",
            "short",
            q("increase(lagwatch_notifications_delivered_total[5m])", "delivered"),
            q("increase(lagwatch_notification_failures_total[5m])", "failed (retried)", "B"),
            w=16,
        )
    )
    d = d.with_panel(tbl("Notifier workers (1 = alive)", "short", q("lagwatch_notifier_up", instant=True), w=8))
    d = d.with_panel(
        ts(
            "Given up per notifier (per 5m): refused for good, or too old",
            "short",
            q("increase(lagwatch_notifier_failed_permanent_total[5m])", "{{notifier}} refused"),
            q("increase(lagwatch_notifier_dropped_expired_total[5m])", "{{notifier}} dropped (max age)", "B"),
            w=16,
        )
    )
    d = d.with_row(db.Row("Lag history lake"))
    d = d.with_panel(
        st(
            "Rows waiting to be written",
            "short",
            q("lagwatch_lake_buffered_rows", "waiting"),
            w=8,
            desc="Grows while the lake's store refuses writes or does not answer; polls and alerts go on.",
        )
    )
    d = d.with_panel(
        ts(
            "Lake write failures and dropped rows (per 5m)",
            "short",
            q("increase(lagwatch_lake_write_failures_total[5m])", "failed writes (rows kept, retried)"),
            q("increase(lagwatch_lake_dropped_rows_total[5m])", "rows dropped (past lake.max_buffer_rows)", "B"),
            w=16,
            desc="Failed writes keep their rows and are tried again; dropped rows are a gap in the lake.",
        )
    )
    return d


def consumer_group() -> db.Dashboard:
    d = base(
        "lagwatch: consumer group",
        "lagwatch-consumer-lag",  # the uid Slack's dashboard button links to (notifiers.slack.grafana_url)
        "One consumer group (or a few): lag per topic and partition, production against consumption, the "
        "catch-up ETA, members and state, when its offsets can expire, and its alerts.",
    )
    d = d.annotation(
        db.AnnotationQuery()
        .name("lagwatch alerts of the group")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .expr(f"lagwatch_group_alerts_firing{{{SEL}}}")
    )
    d = d.annotation(
        db.AnnotationQuery()
        .name("Prometheus alerts of the group")
        .datasource(DS)
        .enable(True)
        .icon_color("orange")
        .expr(f'ALERTS{{alertstate="firing", {SEL}}}')
    )
    d = d.with_row(db.Row("Lag"))
    d = d.with_panel(
        ts(
            "Lag per topic (records)",
            "short",
            q(f"sum by (cluster, group, topic) (lagwatch_group_topic_lag{{{SEL_TOPIC}}})", "{{group}} {{topic}}"),
        )
    )
    d = d.with_panel(
        ts(
            "Lag per topic (seconds)",
            "s",
            q(
                f"max by (cluster, group, topic) (lagwatch_group_topic_lag_seconds_max{{{SEL_TOPIC}}})",
                "{{group}} {{topic}}",
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Lag per partition (records)",
            "short",
            q(f"lagwatch_partition_lag{{{SEL_TOPIC}}}", "{{group}} {{topic}}/{{partition}}"),
            desc="Only for groups and topics in the cluster's partition_metrics (none by default).",
        )
    )
    d = d.with_panel(
        ts(
            "Lag per partition (seconds)",
            "s",
            q(f"lagwatch_partition_lag_seconds{{{SEL_TOPIC}}}", "{{group}} {{topic}}/{{partition}}"),
            desc="Only for groups and topics in the cluster's partition_metrics (none by default).",
        )
    )
    d = d.with_row(db.Row("Rates"))
    d = d.with_panel(
        ts(
            "Production vs consumption (records/s)",
            "short",
            q(f"lagwatch_group_production_rate{{{SEL}}}", "{{group}} produced"),
            q(f"lagwatch_group_consumption_rate{{{SEL}}}", "{{group}} consumed", "B"),
            w=16,
        )
    )
    d = d.with_panel(
        st(
            "Catch-up ETA",
            "s",
            q(f"lagwatch_group_catchup_eta_seconds{{{SEL}}}", "{{group}}"),
            w=8,
            h=8,
            desc="Lag / (consumption - production). No value: caught up, or falling behind (ETA: never).",
        )
    )
    d = d.with_row(db.Row("Members, state, expiry"))
    d = d.with_panel(ts("Members", "short", q(f"lagwatch_group_members{{{SEL}}}", "{{group}}"), w=8))
    d = d.with_panel(tbl("State and kind", "short", q(f"lagwatch_group_state{{{SEL}}} == 1", instant=True), w=8))
    d = d.with_panel(
        st(
            "Offsets can expire in",
            "s",
            q(f"min by (cluster, group) (lagwatch_group_offset_expiry_seconds{{{SEL}}})", "{{group}}"),
            w=8,
            desc="Countdown to the earliest partition's expiry (for a clock lagwatch did not see start, the latest "
            "possible time).",
        )
    )
    return d


def dashboard_json(d: db.Dashboard) -> str:
    model = d.build()
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


DASHBOARDS = {"lagwatch-overview.json": overview, "lagwatch-consumer-group.json": consumer_group}

DATASOURCE = """\
# Grafana provisioning: a Prometheus data source that scrapes lagwatch (adjust the URL).
apiVersion: 1
datasources:
  - name: Prometheus
    type: prometheus
    uid: prometheus
    access: proxy
    url: http://prometheus:9090
    isDefault: true
"""
PROVIDER = """\
# Grafana provisioning: the lagwatch dashboards from files (copy grafana/dashboards/*.json to the path below).
apiVersion: 1
providers:
  - name: lagwatch
    folder: Kafka
    type: file
    disableDeletion: true
    allowUiUpdates: false
    options:
      path: /var/lib/grafana/dashboards/lagwatch
"""


def generated() -> dict[Path, str]:
    files: dict[Path, str] = {}
    for name, make in DASHBOARDS.items():
        text = dashboard_json(make())
        for out in OUT_DIRS:
            files[out / name] = text
    files[PROVISIONING / "datasources" / "lagwatch.yaml"] = DATASOURCE
    files[PROVISIONING / "dashboards" / "lagwatch.yaml"] = PROVIDER
    return files


if __name__ == "__main__":
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
