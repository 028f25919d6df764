"""`report`: what the lake says about each consumer group, per day, as Parquet and as one self-contained HTML page.

    lake partition rows (time range)
      -> per poll and group-topic: lag (sum over partitions), lag seconds (max), over the lag rule's thresholds?
      -> per poll and group: lag (sum), lag seconds (max), over warning / critical in any topic
      -> group_daily:        per group and day, p50/p95/p99/max of lag and lag seconds, share of polls over each
                             threshold (the SLO view), nearest offset expiry
      -> worst_partitions:   per group and day, the partitions with the highest lag
      -> incidents:          runs of polls over the warning threshold, their peak and how long catching up took
      -> expiry_near_misses: groups whose offsets came within --expiry-margin of expiring
    lake alert transitions (the daemon's alerts) -> incidents -> alerts and pages per day, per rule and per team (a
      routing label), time firing, the noisiest groups, whether a near miss was warned of (pipeline.alerting)
    a backtest's output (--backtest) -> its comparison with the daemon, ranked, and its notifications per day
      -> report.html:        the tables and plots (inline SVG; no script, no network), each colour with its legend

Definitions (the README repeats them; tests/test_report_spark.py recomputes every figure with pandas):
- percentiles are exact (Spark's `percentile`, linear interpolation, as pandas' `quantile`), over the polls of the
  day; a poll where no partition of the group had a lag is left out;
- thresholds are the lag rule's (`rules.lag.warning/critical`, offsets and seconds, per group and topic with the
  overrides), from --config or else the configuration the daemon recorded; a group-topic is over a threshold when
  its lag or its lag seconds reaches it; the group is over when any of its topics is. Polls are evenly spaced, so
  the share of polls is the share of observed time (time the daemon did not look counts for neither side);
- an incident is a run of consecutive polls of the group over its warning threshold; it ends at the first poll
  back under it; catch-up time runs from the peak (the first poll at the run's highest lag) to that end.

Run as `lagwatch pipeline report ...`, `python -m lagwatch.pipeline.report ...`, or spark-submit on this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lagwatch.errors import LagwatchError
from lagwatch.escape import slack_code, slack_text
from lagwatch.pipeline.lake_read import check_lake, lake_format, recorded_params
from lagwatch.pipeline.thresholds import lag_thresholds
from lagwatch.pipeline.times import iso, range_text, time_arg

if TYPE_CHECKING:
    from lagwatch.pipeline.alerting import NotificationDay
    from lagwatch.pipeline.report_html import AlertingView, BacktestView
    from lagwatch.pipeline.whatif import CandidateTotals, RuleComparison

PERCENTILES = (0.5, 0.95, 0.99)
DEFAULT_EXPIRY_MARGIN_H = 48.0  # Kafka's default retention (7 days) less the expiry rule's warning point (75%)
DEFAULT_WORST = 5
DEFAULT_PLOTTED_GROUPS = 12
DEFAULT_TEAM_LABEL = "team"  # the routing label the docs' overrides use (rules.md)
MAX_LAST_DAYS = 36500
SERIES_POINTS = 600  # per plotted group: enough for a line that reads well, small enough to inline as SVG


class ReportError(LagwatchError):
    exit_code = 2


@dataclass(frozen=True)
class Report:
    """The job's result, as pandas DataFrames (also written under the output directory)."""

    group_daily: Any
    worst_partitions: Any
    incidents: Any
    expiry_near_misses: Any
    html_path: str
    title: str
    alerting: AlertingView | None = None  # the daemon's alerts over the range
    backtest: BacktestView | None = None  # --backtest's comparison, when given


# -- the Spark part -------------------------------------------------------------------------------------------------


# Per cluster, the rules in force from each time on, oldest first: (from, rules). `--config` gives one from -inf.
RulesTimeline = Sequence[tuple[float, Mapping[str, Any] | None]]


def _threshold_frame(spark: Any, keys: list[Any], rules_of: Mapping[str, RulesTimeline]) -> Any:
    """The thresholds of each group-topic, one row for each configuration in force (`valid_from` to
    `valid_until`): a daemon restarted with other thresholds is judged by each in its time."""
    from lagwatch.rules import RuleResolver, RulesConfig

    resolvers = {
        c: [(start, RuleResolver(RulesConfig.model_validate(r)) if r is not None else None) for start, r in timeline]
        for c, timeline in rules_of.items()
    }
    rows = []
    for k in keys:
        timeline = resolvers.get(k["cluster"])
        if not timeline or any(resolver is None for _, resolver in timeline):
            raise ReportError(f"no recorded configuration for cluster {k['cluster']}: pass --config FILE")
        ends = [start for start, _ in timeline[1:]] + [math.inf]
        for i, ((start, resolver), end) in enumerate(zip(timeline, ends, strict=True)):
            assert resolver is not None
            t = lag_thresholds(resolver, k["cluster"], k["group"], k["topic"])
            figures = (t.warning_offsets, t.warning_seconds, t.critical_offsets, t.critical_seconds)
            # The first configuration also covers the polls before it was recorded.
            rows.append((k["cluster"], k["group"], k["topic"], -math.inf if i == 0 else start, end, *figures))
    schema = (
        "t_cluster string, t_group string, t_topic string, valid_from double, valid_until double, "
        "warning_offsets bigint, warning_seconds double, critical_offsets bigint, critical_seconds double"
    )
    return spark.createDataFrame(rows, schema)


def _over(offsets: str, seconds: str) -> Any:
    """Lag or lag seconds at or over a threshold (a threshold not set, or a figure unknown, is never reached)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("lag") >= F.col(offsets), F.lit(False)) | F.coalesce(
        F.col("lag_seconds") >= F.col(seconds), F.lit(False)
    )


def _percentiles(column: str, name: str) -> list[Any]:
    from pyspark.sql import functions as F

    values = F.expr(f"percentile({column}, array({', '.join(str(p) for p in PERCENTILES)}))")
    return [values.alias(f"_{name}_pct")]


def _spread(df: Any, name: str) -> Any:
    from pyspark.sql import functions as F

    for i, p in enumerate(PERCENTILES):
        df = df.withColumn(f"{name}_p{round(p * 100)}", F.col(f"_{name}_pct")[i])
    return df.drop(f"_{name}_pct")


def compute(
    spark: Any,
    lake: str,
    rules_of: Mapping[str, RulesTimeline],
    since: float | None = None,
    until: float | None = None,
    expiry_margin_s: float = DEFAULT_EXPIRY_MARGIN_H * 3600,
    worst: int = DEFAULT_WORST,
) -> dict[str, Any]:
    """The report's Spark DataFrames (lazy): group_daily, worst_partitions, incidents, expiry_near_misses, and
    group_polls (per poll and group, for the plots)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lagwatch.pipeline.lake_read import read_snapshots

    rows = read_snapshots(spark, lake, since, until)
    parts = rows.where(F.col("row_kind") == "partition").select(
        "cluster", "date", "taken_at", "group", "topic", "partition", "lag", "lag_seconds"
    )
    topic_polls = parts.groupBy("cluster", "date", "taken_at", "group", "topic").agg(
        F.sum("lag").alias("lag"), F.max("lag_seconds").alias("lag_seconds")
    )
    keys = topic_polls.select("cluster", "group", "topic").distinct().collect()
    thresholds = _threshold_frame(spark, keys, rules_of)
    in_force = (
        (F.col("cluster") == F.col("t_cluster"))
        & (F.col("group") == F.col("t_group"))
        & (F.col("topic") == F.col("t_topic"))
        & (F.col("taken_at") >= F.col("valid_from"))
        & (F.col("taken_at") < F.col("valid_until"))
    )
    topic_polls = topic_polls.join(F.broadcast(thresholds), in_force, "left").drop(
        "t_cluster", "t_group", "t_topic", "valid_from", "valid_until"
    )
    topic_polls = topic_polls.withColumn("over_warning", _over("warning_offsets", "warning_seconds")).withColumn(
        "over_critical", _over("critical_offsets", "critical_seconds")
    )
    group_polls = (
        topic_polls.groupBy("cluster", "date", "taken_at", "group")
        .agg(
            F.sum("lag").alias("lag"),
            F.max("lag_seconds").alias("lag_seconds"),
            F.max(F.col("over_warning").cast("int")).alias("over_warning"),
            F.max(F.col("over_critical").cast("int")).alias("over_critical"),
        )
        .cache()
    )

    daily = group_polls.groupBy("cluster", "date", "group").agg(
        F.count("*").alias("polls"),
        F.min("taken_at").alias("first_poll"),
        F.max("taken_at").alias("last_poll"),
        *_percentiles("lag", "lag"),
        F.max("lag").alias("lag_max"),
        *_percentiles("lag_seconds", "lag_seconds"),
        F.max("lag_seconds").alias("lag_seconds_max"),
        F.avg("over_warning").alias("share_over_warning"),
        F.avg("over_critical").alias("share_over_critical"),
    )
    daily = _spread(_spread(daily, "lag"), "lag_seconds")

    expiry = (
        rows.where((F.col("row_kind") == "group") & F.col("expires_at").isNotNull())
        .withColumn("left_s", F.col("expires_at") - F.col("taken_at"))
        .groupBy("cluster", "date", "group")
        .agg(
            F.min("left_s").alias("min_time_to_expiry_s"),
            F.min_by("taken_at", F.struct("left_s", "taken_at")).alias("nearest_at"),
            F.min_by("expires_at", F.struct("left_s", "taken_at")).alias("expires_at"),
        )
    )
    daily = daily.join(
        expiry.select("cluster", "date", "group", "min_time_to_expiry_s"), ["cluster", "date", "group"], "left"
    )
    near_misses = expiry.where(F.col("min_time_to_expiry_s") <= expiry_margin_s)

    by_partition = parts.groupBy("cluster", "date", "group", "topic", "partition").agg(
        F.max("lag").alias("lag_max"),
        F.expr("percentile(lag, 0.95)").alias("lag_p95"),
        F.max("lag_seconds").alias("lag_seconds_max"),
    )
    rank = Window.partitionBy("cluster", "date", "group").orderBy(
        F.col("lag_max").desc_nulls_last(), F.col("topic"), F.col("partition")
    )
    worst_partitions = by_partition.withColumn("rank", F.row_number().over(rank)).where(F.col("rank") <= worst)

    incidents = _incidents(group_polls)
    return {
        "group_daily": daily,
        "worst_partitions": worst_partitions,
        "incidents": incidents,
        "expiry_near_misses": near_misses,
        "group_polls": group_polls,
    }


def _incidents(group_polls: Any) -> Any:
    """Runs of consecutive polls over the warning threshold, per group (across days)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("cluster", "group").orderBy("taken_at")
    marked = (
        group_polls.withColumn("previous_over", F.lag("over_warning", 1, 0).over(order))
        .withColumn("next_poll", F.lead("taken_at").over(order))
        .withColumn("starts", ((F.col("over_warning") == 1) & (F.col("previous_over") == 0)).cast("int"))
        .withColumn("run", F.sum("starts").over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
        .where(F.col("over_warning") == 1)
    )
    # The peak: the highest lag, its first poll on a tie (max of (lag, -time)).
    peak = F.max(F.struct(F.coalesce(F.col("lag"), F.lit(-1)).alias("lag"), (-F.col("taken_at")).alias("t")))
    runs = marked.groupBy("cluster", "group", "run").agg(
        F.min("taken_at").alias("started_at"),
        peak.alias("_peak"),
        F.max("lag_seconds").alias("peak_lag_seconds"),
        F.max("over_critical").cast("boolean").alias("critical"),
        F.count("*").alias("polls_over"),
        F.max_by("next_poll", "taken_at").alias("ended_at"),
    )
    return (
        runs.withColumn("peak_lag", F.when(F.col("_peak.lag") >= 0, F.col("_peak.lag")))
        .withColumn("peak_at", -F.col("_peak.t"))
        .withColumn("duration_s", F.col("ended_at") - F.col("started_at"))
        .withColumn("catch_up_s", F.col("ended_at") - F.col("peak_at"))
        .withColumn("ongoing", F.col("ended_at").isNull())
        .withColumn("date", F.date_format(F.timestamp_seconds("started_at"), "yyyy-MM-dd"))
        .drop("_peak", "run")
    )


def _series(group_polls: Any, chosen: list[tuple[str, str]], points: int = SERIES_POINTS) -> Any:
    """Per chosen group, its lag and lag seconds over time, at most `points` buckets (the max of each): enough to
    see incidents, small enough to draw."""
    from pyspark.sql import functions as F

    if not chosen:
        return None
    spark = group_polls.sparkSession
    wanted = spark.createDataFrame(chosen, "cluster string, `group` string")
    df = group_polls.join(F.broadcast(wanted), ["cluster", "group"])
    span = df.agg(F.min("taken_at").alias("a"), F.max("taken_at").alias("b")).collect()[0]
    if span["a"] is None:
        return None
    width = max((span["b"] - span["a"]) / points, 1e-9)
    bucket = F.floor((F.col("taken_at") - F.lit(span["a"])) / F.lit(width))
    return (
        df.withColumn("bucket", bucket)
        .groupBy("cluster", "group", "bucket")
        .agg(F.min("taken_at").alias("t"), F.max("lag").alias("lag"), F.max("lag_seconds").alias("lag_seconds"))
        .orderBy("cluster", "group", "t")
        .toPandas()
    )


def _distribution(group_polls: Any, chosen: list[tuple[str, str]]) -> Any:
    """Per chosen group over the whole range: min, quartiles, p99 and max of lag seconds and of lag."""
    from pyspark.sql import functions as F

    if not chosen:
        return None
    spark = group_polls.sparkSession
    wanted = spark.createDataFrame(chosen, "cluster string, `group` string")
    aggs = []
    for column in ("lag", "lag_seconds"):
        aggs += [
            F.min(column).alias(f"{column}_min"),
            F.expr(f"percentile({column}, array(0.25, 0.5, 0.75, 0.99))").alias(f"{column}_q"),
            F.max(column).alias(f"{column}_max"),
        ]
    return group_polls.join(F.broadcast(wanted), ["cluster", "group"]).groupBy("cluster", "group").agg(*aggs).toPandas()


# -- the driver ---------------------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"report: {message}", file=sys.stderr, flush=True)


def _config_rules(config: str | None) -> Mapping[str, Any] | None:
    """--config's rules, validated before Spark starts (one-line errors naming the file and field)."""
    from lagwatch.pipeline.backtest import load_candidate

    if config is None:
        return None
    from pathlib import Path

    from lagwatch.config import _check_yaml

    data = _check_yaml(Path(config)) if Path(config).is_file() else None  # a broken file: said by load_candidate
    if isinstance(data, dict) and data.get("rules") is None:
        # The daemon's own file without rules: (the chart's, from the README's values) ran with the defaults,
        # and the lake recorded what it ran with: that is what the report judges by.
        _say(f"thresholds: the configuration the daemon recorded ({config} has no rules:)")
        return None
    candidate = load_candidate(config)
    if candidate.rules is None:
        raise ReportError("--config: give a file with a rules: section (or leave --config out)")
    from pydantic import ValidationError

    from lagwatch.rules import RulesConfig

    try:  # the file's rules alone, over the defaults (load_candidate leaves checks between values to the overlay)
        return RulesConfig.model_validate(candidate.rules).model_dump(mode="json")
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in ("rules", *err["loc"]))
        raise ReportError(f"--config {config}: {where}: {str(err['msg']).removeprefix('Value error, ')}") from None


def _rules_of(
    spark: Any, lake: str, clusters: list[str], rules: Mapping[str, Any] | None, until: float | None
) -> dict[str, RulesTimeline]:
    """Per cluster, the rules the thresholds come from: --config's for every cluster, or the recorded ones, each
    from its daemon start on (the last one recorded was applied to the whole range: a threshold raised later
    hid every earlier incident)."""
    if rules is not None:
        return {c: [(-math.inf, rules)] for c in clusters}
    recorded = recorded_params(spark, lake, until)
    missing = [c for c in clusters if c not in recorded]
    if missing:
        raise ReportError(f"no recorded configuration for cluster(s) {', '.join(missing)}: pass --config FILE")
    return {c: [(p.recorded_at, p.rules) for p in recorded[c]] for c in clusters}


def run_report(
    lake: str,
    output: str,
    since: float | None = None,
    until: float | None = None,
    config: str | None = None,
    spark: Any = None,
    expiry_margin_s: float = DEFAULT_EXPIRY_MARGIN_H * 3600,
    worst: int = DEFAULT_WORST,
    plotted_groups: int = DEFAULT_PLOTTED_GROUPS,
    master: str | None = None,
    backtest: str | None = None,
    team_label: str = DEFAULT_TEAM_LABEL,
) -> Report:
    """The whole job. Every input is checked before Spark starts (a JVM takes seconds to come up)."""
    started = time.monotonic()
    if since is not None and until is not None and since >= until:
        raise ReportError("--since must be before --until")
    if not (0 < expiry_margin_s < math.inf) or worst < 1 or plotted_groups < 0:
        raise ReportError("--expiry-margin-hours and --worst must be positive, --plot-groups not negative")
    if not team_label.strip():
        raise ReportError("--team-label: give a label name (team, by default)")
    rules = _config_rules(config)
    lake_path = check_lake(lake, "report", ReportError)
    if backtest is not None:
        _check_backtest(backtest)
    options = _Options(expiry_margin_s, worst, plotted_groups, master, backtest, team_label)

    def job(target: str) -> Report:
        try:
            return _report_on_spark(lake, lake_path, output, target, since, until, rules, spark, started, options)
        except LagwatchError:
            raise
        except Exception as e:  # a Spark or Py4J failure (unreadable file, unknown scheme...): one line, no JVM trace
            from lagwatch.pipeline.jobs import spark_error

            raise LagwatchError(f"the Spark job failed: {spark_error(e)}") from None

    if "://" in output:  # written in place (object stores have no rename)
        return job(output)
    from pathlib import Path

    from lagwatch.pipeline.jobs import check_out_dir

    created = Path(output).absolute()  # the outermost directory this run creates, removed if it fails
    while not created.parent.exists():
        created = created.parent
    created_any = not created.exists()
    check_out_dir(output)
    # Everything is written under a hidden staging directory and moved into place only once all of it is there:
    # a failed run leaves the previous report as it was (and no directory it created).
    staging = f"{output.rstrip('/')}/.report-staging-{uuid.uuid4().hex[:12]}"
    try:
        report = job(staging)
        for name in [*TABLES, "report.html"]:
            if os.path.lexists(f"{output}/{name}"):
                os.replace(f"{output}/{name}", f"{staging}/old-{name}")
            os.replace(f"{staging}/{name}", f"{output}/{name}")
    except BaseException:
        shutil.rmtree(created if created_any else staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return report


TABLES = ("group_daily", "worst_partitions", "incidents", "expiry_near_misses")


@dataclass(frozen=True)
class _Options:
    expiry_margin_s: float
    worst: int
    plotted_groups: int
    master: str | None
    backtest: str | None
    team_label: str


def _check_backtest(path: str) -> None:
    """--backtest: a backtest's output (its `_comparison/`), said before Spark starts where it can be."""
    if "://" in path and not path.startswith("file:"):
        return  # an object store: Spark says, in one line, if it is not there
    local = path.removeprefix("file://").removeprefix("file:")
    if not os.path.isdir(os.path.join(local, "_comparison")):
        raise ReportError(f"--backtest {path}: not a backtest's output (no _comparison/ in it)")


def _report_on_spark(
    lake: str,
    lake_path: str,
    output: str,
    staging: str,
    since: float | None,
    until: float | None,
    rules: Mapping[str, Any] | None,
    spark: Any,
    started: float,
    options: _Options,
) -> Report:
    """The job proper: the Parquet tables and report.html under `staging`, named as they will be under `output`."""
    expiry_margin_s, worst, plotted_groups, master = (
        options.expiry_margin_s,
        options.worst,
        options.plotted_groups,
        options.master,
    )
    if spark is None:  # under spark-submit: its master, and its settings over lagwatch's defaults
        from lagwatch.pipeline.jobs import default_master
        from lagwatch.pipeline.session import spark_session

        master = default_master(master)
        _say(f"starting Spark ({master or 'from spark-submit'})")
        from lagwatch.lake.settings import is_s3

        s3 = is_s3(lake) or is_s3(output)
        delta = lake_format(lake) == "delta"
        spark = spark_session(master=master, app="lagwatch-report", kafka=False, s3=s3, delta=delta)

    from lagwatch.pipeline.lake_read import polls_per_cluster, read_snapshots

    _say(f"reading {lake_path}")
    counts = polls_per_cluster(read_snapshots(spark, lake_path, since, until))
    if not counts:
        raise ReportError(f"no snapshots in {lake} {range_text(since, until)}")
    for r in counts:
        _say(f"cluster {r['cluster']}: {r['polls']} polls, {iso(r['first'])} .. {iso(r['last'])}")
    rules_of = _rules_of(spark, lake_path, [r["cluster"] for r in counts], rules, until)
    frames = compute(spark, lake_path, rules_of, since, until, expiry_margin_s, worst)
    out: dict[str, Any] = {}
    sort = {
        "group_daily": ["cluster", "date", "group"],
        "worst_partitions": ["cluster", "date", "group", "rank"],
        "incidents": ["cluster", "group", "started_at"],
        "expiry_near_misses": ["cluster", "date", "group"],
    }
    steps = len(sort) + 2 + (options.backtest is not None)
    for i, (name, keys) in enumerate(sort.items(), 1):
        _say(f"[{i}/{steps}] {name}")
        frames[name].write.mode("overwrite").parquet(f"{staging}/{name}")
        out[name] = spark.read.parquet(f"{staging}/{name}").toPandas().sort_values(keys).reset_index(drop=True)
    _say(f"[{len(sort) + 1}/{steps}] the daemon's alerts")
    ranges = {str(r["cluster"]): (float(r["first"]), float(r["last"])) for r in counts}
    days = sorted(set(out["group_daily"]["date"])) if len(out["group_daily"]) else []
    alerting = _alerting(spark, lake_path, since, until, ranges, days, options.team_label)
    backtest_view = None
    if options.backtest is not None:
        _say(f"[{len(sort) + 2}/{steps}] the backtest at {options.backtest}")
        from lagwatch.pipeline.backtest import RECORDED

        backtest_view, notifications = _backtest_view(spark, options.backtest)
        recorded = [n for n in notifications if n.config == RECORDED]
        if recorded:
            alerting = dataclasses.replace(
                alerting,
                notifications=recorded,
                notifications_from=f"as the backtest at {options.backtest} replayed the recorded configuration "
                "(the lake records alert transitions, not deliveries)",
            )
    _say(f"[{steps}/{steps}] plots and report.html")
    chosen = _plotted(out["group_daily"], plotted_groups)
    series = _series(frames["group_polls"], chosen)
    distribution = _distribution(frames["group_polls"], chosen)
    frames["group_polls"].unpersist()
    from lagwatch.pipeline.report_html import render

    title = f"lagwatch lag report, {iso(counts[0]['first'])[:10]} .. {iso(max(r['last'] for r in counts))[:10]}"
    page = render(
        out["group_daily"],
        out["worst_partitions"],
        out["incidents"],
        out["expiry_near_misses"],
        series,
        distribution,
        chosen,
        {c: timeline[-1][1] for c, timeline in rules_of.items()},  # the plots draw the newest thresholds
        expiry_margin_s,
        title=title,
        alerting=alerting,
        backtest=backtest_view,
    )
    html_path = f"{output}/report.html"
    _write_text(f"{staging}/report.html", page)
    report = Report(
        out["group_daily"],
        out["worst_partitions"],
        out["incidents"],
        out["expiry_near_misses"],
        html_path,
        title,
        alerting,
        backtest_view,
    )
    _say(f"wrote {output} in {time.monotonic() - started:.1f} s")
    print(summary(report))
    return report


def _alerting(
    spark: Any,
    lake: str,
    since: float | None,
    until: float | None,
    ranges: Mapping[str, tuple[float, float]],
    days: Sequence[str],
    team_label: str,
) -> AlertingView:
    """The daemon's alerts in the range (the lake's alert transitions, paired into incidents), summed up."""
    from lagwatch.pipeline.alerting import FiredAlert, summarize
    from lagwatch.pipeline.backtest import alert_rows, transitions_of
    from lagwatch.pipeline.report_html import AlertingView
    from lagwatch.pipeline.whatif import recorded_incidents

    rows = alert_rows(spark, lake, since, until)
    teams: dict[tuple[str, str], str | None] = {}
    for r in rows:
        labels = _labels(r["labels_json"])
        team = labels.get(team_label)
        teams[(str(r["cluster"]), str(r["key"]))] = team if isinstance(team, str) else None
    incidents = recorded_incidents(transitions_of(rows), ranges)
    alerts = [FiredAlert(i, teams.get((i.cluster, i.key))) for i in incidents.compared]
    return AlertingView(summarize(alerts, ranges, days), alerts, ranges, team_label)


def _labels(text: str | None) -> dict[str, Any]:
    import json

    try:
        labels = json.loads(text or "{}")
    except ValueError:
        return {}
    return labels if isinstance(labels, dict) else {}


def _backtest_view(spark: Any, path: str) -> tuple[BacktestView, list[NotificationDay]]:
    """A backtest's comparison (per config: totals and per rule) and its replay's notifications per day."""
    from lagwatch.pipeline.alerting import notifications_per_day
    from lagwatch.pipeline.backtest import (
        COMPARISON_FIELDS,
        COMPARISON_SCHEMA_VERSION,
        INCIDENT_FIELDS,
        OUTPUT_COLUMNS,
        ddl,
    )
    from lagwatch.pipeline.report_html import BacktestView
    from lagwatch.pipeline.whatif import RuleComparison

    base = path.rstrip("/")
    comparison = spark.read.schema(ddl(COMPARISON_FIELDS)).parquet(f"{base}/_comparison").collect()
    incidents = spark.read.schema(ddl(INCIDENT_FIELDS)).parquet(f"{base}/_incidents")
    shifted: dict[str, list[float]] = {}
    for r in incidents.where("shift_s is not null").select("config", "shift_s").collect():
        shifted.setdefault(str(r["config"]), []).append(float(r["shift_s"]))
    shifts = {config: statistics.median(values) for config, values in shifted.items()}
    newer = {int(r["schema_version"]) for r in comparison if r["schema_version"] is not None} - set(
        range(1, COMPARISON_SCHEMA_VERSION + 1)
    )
    if newer:
        raise ReportError(
            f"--backtest {path}: its comparison is schema version {max(newer)}, newer than this lagwatch reads "
            f"({COMPARISON_SCHEMA_VERSION}): report with the lagwatch that ran the backtest"
        )
    fields = RuleComparison._fields
    by_config: dict[str, list[RuleComparison]] = {}
    for r in comparison:
        values = {f: r[f] for f in fields}
        values.update({f: int(values[f] or 0) for f in ("merged", "split")})  # version 1 files have neither
        by_config.setdefault(str(r["config"]), []).append(RuleComparison(**values))
    totals = [_totals(config, rows, shifts.get(config)) for config, rows in by_config.items()]
    replay = spark.read.schema(", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())).parquet(base)
    notes = replay.where("kind = 'notification'").select("config", "fired_at", "notification_kind").collect()
    notifications = notifications_per_day(
        (str(n["config"]), float(n["fired_at"]), str(n["notification_kind"])) for n in notes
    )
    return BacktestView(path, totals, by_config, notifications), notifications


def _totals(config: str, rows: Sequence[RuleComparison], median_shift_s: float | None) -> CandidateTotals:
    """A config's totals from its rows per rule and severity (what `whatif.totals` makes from the matches)."""
    from lagwatch.pipeline.whatif import CRITICAL, CandidateTotals

    def total(name: str, only_critical: bool = False) -> int:
        return sum(int(getattr(r, name)) for r in rows if not only_critical or r.severity == CRITICAL)

    return CandidateTotals(
        config=config,
        alerts_recorded=total("recorded"),
        alerts_replayed=total("replayed"),
        alerts_gained=total("gained"),
        alerts_lost=total("lost"),
        pages_recorded=total("recorded", True),
        pages_replayed=total("replayed", True),
        pages_gained=total("pages_gained"),
        pages_lost=total("pages_lost"),
        earlier=total("earlier"),
        later=total("later"),
        median_shift_s=median_shift_s,
        merged=total("merged"),
        split=total("split"),
    )


def _plotted(daily: Any, n: int) -> list[tuple[str, str]]:
    """The groups worth a plot: most time over the warning threshold, then the highest lag seconds, then lag."""
    if daily.empty or n == 0:
        return []
    worst = (
        daily.groupby(["cluster", "group"])
        .agg(share=("share_over_warning", "mean"), seconds=("lag_seconds_max", "max"), lag=("lag_max", "max"))
        .fillna(-1)
        .sort_values(["share", "seconds", "lag"], ascending=False)
    )
    return [(str(c), str(g)) for c, g in worst.index[:n]]


def _write_text(path: str, text: str) -> None:
    """Atomically (a temporary name, then a rename) on a local path; through pyarrow's filesystems on a URL."""
    if "://" in path:
        from lagwatch.lake.writer import open_filesystem

        filesystem, target = open_filesystem(path)
        with filesystem.open_output_stream(target) as stream:
            stream.write(text.encode())
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def summary(report: Report) -> str:
    daily, incidents = report.group_daily, report.incidents
    lines = ["", "== report =="]
    groups = daily.groupby(["cluster", "group"]).size().shape[0] if len(daily) else 0
    lines.append(
        f"{groups} group(s), {daily['date'].nunique() if len(daily) else 0} day(s), {len(incidents)} incident(s)"
    )
    if len(daily):
        breach = daily[daily["share_over_warning"] > 0].sort_values("share_over_warning", ascending=False)
        lines.append(f"group-days over the warning threshold at some poll: {len(breach)}")
        for r in breach.head(10).itertuples():
            lines.append(
                f"  {r.cluster}/{r.group} {r.date}: {r.share_over_warning:.1%} of polls over warning, "
                f"{r.share_over_critical:.1%} over critical, lag p99 {r.lag_p99:.0f}"
            )
    lines.append(f"expiry near misses: {len(report.expiry_near_misses)}")
    if report.alerting is not None:
        a = report.alerting.summary
        lines.append(f"the daemon's alerts: {a.alerts}, pages {a.pages}, {a.firing_s / 3600:,.1f} alert-hours firing")
        for t in a.rules[:5]:
            lines.append(f"  {t.name}: {t.alerts} alerts, {t.pages} pages, {t.firing_s / 3600:,.1f} h firing")
    lines.append(f"html: {report.html_path}")
    return "\n".join(lines)


def digest(report: Report, title: str, limit: int = 5) -> list[str]:
    """The report in a few lines of Slack mrkdwn: the groups with the most time over warning, the longest
    incidents, the expiry near misses, and where the page is."""
    daily, incidents, misses = report.group_daily, report.incidents, report.expiry_near_misses
    clusters = daily["cluster"].nunique() if len(daily) else 1

    def name(cluster: str, group: str) -> str:  # names from the cluster: never markup (lagwatch.escape)
        return slack_code(group if clusters == 1 else f"{cluster}/{group}", 300)

    groups = daily.groupby(["cluster", "group"]).ngroups if len(daily) else 0
    lines = [f"{groups} groups, {len(incidents)} incidents, {len(misses)} offset expiry near misses"]
    breach = daily[daily["share_over_warning"] > 0].sort_values("share_over_warning", ascending=False)
    if len(breach):
        lines.append("*Most time over the warning threshold*")
        for r in breach.head(limit).itertuples():
            lines.append(
                f"• {name(r.cluster, r.group)} {r.date}: {r.share_over_warning:.1%} of the time "
                f"({r.share_over_critical:.1%} critical), lag p99 {r.lag_p99:,.0f}"
            )
    else:
        lines.append("No group was over its warning threshold.")
    if len(incidents):
        lines.append("*Longest incidents*")
        for r in incidents.sort_values("duration_s", ascending=False, na_position="first").head(limit).itertuples():
            lasted = "ongoing" if r.ongoing else f"lasted {_hours(r.duration_s)}, caught up in {_hours(r.catch_up_s)}"
            lines.append(f"• {name(r.cluster, r.group)} from {iso(r.started_at)}: peak lag {r.peak_lag:,.0f}, {lasted}")
    for r in misses.sort_values("min_time_to_expiry_s").head(limit).itertuples():
        if r.min_time_to_expiry_s <= 0:  # the expiry time passed while lagwatch watched: the offsets may be gone
            lines.append(f"• {name(r.cluster, r.group)} reached its offsets' expiry time on {r.date}")
        else:
            left = _hours(r.min_time_to_expiry_s)
            lines.append(f"• {name(r.cluster, r.group)} came within {left} of losing its offsets")
    lines.append(f"Report: {slack_text(report.html_path)}")
    return lines


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _digest_notifier(config: str | None, name: str) -> Any:
    """The notifier `name` of the daemon's configuration (checked before Spark starts)."""
    from pathlib import Path

    from lagwatch.config import load_settings
    from lagwatch.errors import ConfigError
    from lagwatch.notify import build_notifiers
    from lagwatch.notify.base import DigestPoster

    if config is None:
        raise ReportError("--notify: needs --config, the daemon's configuration with its notifiers")
    notifiers = {n: notifier for n, (notifier, _) in build_notifiers(load_settings(Path(config))).items()}
    if name not in notifiers:
        raise ConfigError([f"--notify: {name!r} is not configured (configured: {', '.join(notifiers) or 'none'})"])
    notifier = notifiers[name]
    if not isinstance(notifier, DigestPoster):
        raise ReportError(f"--notify: {name} cannot post a digest")
    return notifier


# -- command line -------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", help="the lake's path or URI (default: --config's lake.path, else ./lake)")
    parser.add_argument("--out", help="output directory: Parquet tables and report.html (default: LAKE/reports/DAY)")
    parser.add_argument("--since", type=time_arg, help="ISO time or date, UTC unless it says (default: the start)")
    parser.add_argument("--until", type=time_arg, help="ISO time or date, exclusive (default: the end)")
    parser.add_argument(
        "--last-days",
        type=int,
        metavar="N",
        help="the N whole days (UTC) before today, instead of --since/--until (a daily CronJob: 1)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="thresholds from this config's rules: (the daemon's file, or just rules:); default: what the daemon "
        "recorded in the lake",
    )
    parser.add_argument(
        "--expiry-margin-hours",
        type=float,
        default=DEFAULT_EXPIRY_MARGIN_H,
        help=f"a near miss: offsets came within this of expiring (default {DEFAULT_EXPIRY_MARGIN_H:g})",
    )
    parser.add_argument("--worst", type=int, default=DEFAULT_WORST, help="worst partitions per group and day")
    parser.add_argument(
        "--plot-groups", type=int, default=DEFAULT_PLOTTED_GROUPS, help="groups drawn in the HTML report"
    )
    parser.add_argument(
        "--notify",
        metavar="NOTIFIER",
        help="post a digest through this notifier of --config (slack, slack_webhook, webhook:NAME, log)",
    )
    parser.add_argument(
        "--backtest",
        metavar="DIR",
        help="a backtest's output: its comparison with the daemon as a section, and notifications per day",
    )
    parser.add_argument(
        "--team-label",
        default=DEFAULT_TEAM_LABEL,
        metavar="NAME",
        help=f"the routing label alerts are counted per team by (default {DEFAULT_TEAM_LABEL})",
    )
    parser.add_argument("--master", default=None, help="Spark master (default: local[2]; spark-submit's own)")


def _lake_of(args: argparse.Namespace) -> str:
    if args.lake is not None:
        return str(args.lake)
    if args.config is not None:
        from pathlib import Path

        from lagwatch.config import _check_yaml

        data = _check_yaml(Path(args.config)) or {}  # a one-line ConfigError for a missing or broken file
        lake = data.get("lake") if isinstance(data, dict) else None
        if isinstance(lake, dict) and isinstance(lake.get("path"), str):
            return str(lake["path"])
    return "lake"


def _window(args: argparse.Namespace, now: float) -> tuple[float | None, float | None]:
    if args.last_days is None:
        return args.since, args.until
    if args.since is not None or args.until is not None:
        raise ReportError("--last-days replaces --since and --until: give one or the other")
    if not 1 <= args.last_days <= MAX_LAST_DAYS:
        raise ReportError(f"--last-days must be between 1 and {MAX_LAST_DAYS}")
    today = now - now % 86400
    return today - args.last_days * 86400, today


def run_job(args: argparse.Namespace) -> int:
    from lagwatch.pipeline.jobs import default_master, use_lake_config

    default_master(args.master)  # a master Spark would not take: said first
    use_lake_config(args.config)  # the daemon's file: its lake's S3 access, for pyarrow and Spark
    lake = _lake_of(args)
    since, until = _window(args, time.time())
    notifier = _digest_notifier(args.config, args.notify) if args.notify else None
    out = args.out or f"{lake.rstrip('/')}/reports/{datetime.now(UTC).strftime('%Y-%m-%d')}"
    report = run_report(
        lake,
        out,
        since,
        until,
        args.config,
        None,
        args.expiry_margin_hours * 3600,
        args.worst,
        args.plot_groups,
        args.master,
        args.backtest,
        args.team_label,
    )
    return 0 if notifier is None else send_digest(notifier, report)


def send_digest(notifier: Any, report: Report) -> int:
    """The digest, once; a failure is one line and exit 1 (the report itself is written)."""
    from lagwatch.notify.base import DeliveryError

    try:
        notifier.post_digest(report.title, digest(report, report.title))
    except DeliveryError as e:
        print(f"lagwatch: the report is written, but its digest was not sent: {e}", file=sys.stderr)
        return 1
    _say(f"digest sent through {notifier.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from lagwatch.pipeline.jobs import run_main

    return run_main("lagwatch pipeline report", add_arguments, run_job, argv)


if __name__ == "__main__":
    sys.exit(main())
