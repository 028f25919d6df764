"""`backtest`: replays the lake under candidate configurations and reports the alerts each would have raised.

    lake snapshots (time range) -> per cluster (groupBy(cluster).applyInPandas, in parallel on Spark):
        ClusterSnapshots in time order -> the daemon's own ClusterPipeline.step, once per candidate config
    -> every alert that would have fired (start, end, rule, severity, peak lag, condition-to-alert time) and every
       notification (pages), as Parquet under --output, and a summary with the configs side by side.

The executor function imports only the core and `lagwatch.lake.codec` (stdlib + model), never pyarrow's writer or
the daemon. Run as `python -m lagwatch.pipeline.backtest ...`, `lagwatch backtest ...`, or with spark-submit on this
file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lagwatch.errors import ConfigError, LagwatchError

RECORDED = "recorded"  # the configuration the daemon ran with, as the lake recorded it per cluster
DEFAULT_MAX_GAP_S = 90.0  # 2 x the default poll interval + the default request timeout
OUTPUT_COLUMNS: dict[str, str] = {
    "config": "string",
    "cluster": "string",
    "kind": "string",  # alert | notification
    "key": "string",
    "rule": "string",  # notifications: the rules firing in it, comma-separated
    "severity": "string",  # alerts: at firing
    "max_severity": "string",
    "group": "string",
    "labels_json": "string",
    "summary": "string",
    "started_at": "double",  # alerts: when the condition was first seen
    "fired_at": "double",  # alerts: firing; notifications: created
    "resolved_at": "double",  # null: still firing at the end of the range
    "peak_lag": "long",
    "condition_to_alert_s": "double",
    "notification_kind": "string",  # firing | update | repeat | resolved
}


class BacktestError(LagwatchError):
    exit_code = 2


@dataclass(frozen=True)
class Candidate:
    name: str
    rules: Mapping[str, Any] | None  # None: the recorded configuration of each cluster
    alerts: Mapping[str, Any] | None


@dataclass(frozen=True)
class ClusterParams:
    max_gap_s: float
    read_committed: bool
    rules: Mapping[str, Any] | None  # as recorded
    alerts: Mapping[str, Any] | None


# -- the replay (runs on the executors; core only) ------------------------------------------------------------------


def replay(
    cluster: str,
    rows: Sequence[Mapping[str, Any]],
    candidates: Sequence[Candidate],
    params: ClusterParams,
) -> list[dict[str, Any]]:
    """Folds the daemon's step over one cluster's snapshots, once per candidate; alert and notification rows."""
    from lagwatch.alerts import AlertBook, AlertsConfig
    from lagwatch.alerts.transitions import TransitionTracker
    from lagwatch.history import ClusterHistory
    from lagwatch.lake.codec import polls_from_rows
    from lagwatch.rules import RuleResolver, RulesConfig
    from lagwatch.step import ClusterPipeline

    polls = polls_from_rows(cluster, rows)
    out: list[dict[str, Any]] = []
    for candidate in candidates:
        rules = candidate.rules if candidate.rules is not None else params.rules
        alerts = candidate.alerts if candidate.alerts is not None else params.alerts
        if rules is None or alerts is None:
            continue  # no recorded configuration for this cluster (checked on the driver)
        book = AlertBook(AlertsConfig.model_validate(alerts))
        book.load_config_silences()
        history = ClusterHistory(cluster, max_gap_s=params.max_gap_s)
        pipeline = ClusterPipeline(
            cluster, history, RuleResolver(RulesConfig.model_validate(rules)), book, params.read_committed
        )
        tracker = TransitionTracker(cluster)
        open_alerts: dict[str, dict[str, Any]] = {}
        base = {"config": candidate.name, "cluster": cluster}
        for poll in polls:
            snapshot = poll.snapshot
            evaluation = pipeline.step(snapshot, poll.records, poll.records_caught_up)
            for t in tracker.observe(book, evaluation.now):
                if t.transition == "firing":
                    open_alerts[t.key] = {
                        **base,
                        "kind": "alert",
                        "key": t.key,
                        "rule": t.rule,
                        "severity": t.severity,
                        "group": t.group,
                        "labels_json": json.dumps(t.labels, sort_keys=True),
                        "summary": t.summary,
                        "started_at": t.started_at,
                        "fired_at": t.fired_at,
                        "condition_to_alert_s": t.fired_at - t.started_at,
                    }
                else:
                    row = open_alerts.pop(t.key, None)
                    if row is not None:
                        out.append(
                            {**row, "resolved_at": t.resolved_at, "peak_lag": t.peak_lag, "max_severity": t.severity}
                        )
            for n in pipeline.due(snapshot.taken_at):
                out.append(
                    {
                        **base,
                        "kind": "notification",
                        "key": n.group_key,
                        "rule": ",".join(sorted({a["rule"] for a in n.firing})),
                        "severity": n.severity,
                        "group": n.group_labels.get("group") or None,
                        "labels_json": json.dumps(n.group_labels, sort_keys=True),
                        "fired_at": n.created_at,
                        "notification_kind": n.kind,
                    }
                )
        for key, row in open_alerts.items():  # still firing when the range ends
            seen = tracker.firing.get(key)
            out.append(
                {**row, "peak_lag": seen.peak_lag if seen else None, "max_severity": seen.worst if seen else None}
            )
    return out


def _executor(candidates: Sequence[Candidate], params: Mapping[str, ClusterParams]) -> Any:
    def run(pdf: Any) -> Any:
        import pandas as pd  # type: ignore[import-untyped]

        cluster = str(pdf["cluster"].iloc[0])
        rows = pdf.to_dict("records")
        cluster_params = params.get(cluster, ClusterParams(DEFAULT_MAX_GAP_S, False, None, None))
        out = replay(cluster, rows, candidates, cluster_params)
        return pd.DataFrame(out, columns=list(OUTPUT_COLUMNS))

    return run


# -- the driver ---------------------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"backtest: {message}", file=sys.stderr, flush=True)


def _time_arg(value: str) -> float:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO time (e.g. 2026-11-01 or 2026-11-01T12:00:00Z): {value!r}"
        ) from None
    t = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    try:
        datetime.fromtimestamp(t, UTC)  # the lake's date partitions need a date of years 1 to 9999 in UTC
    except (OverflowError, ValueError):
        raise argparse.ArgumentTypeError(f"out of range: {value!r}") from None
    return t


def load_candidate(path: str) -> Candidate:
    """A YAML file with `rules:` and/or `alerts:` (a whole lagwatch config works; other sections are ignored), or
    `recorded`. Invalid: BacktestError naming the file and the field."""
    if path == RECORDED:
        return Candidate(RECORDED, None, None)
    from lagwatch.alerts import AlertsConfig
    from lagwatch.config import _check_yaml
    from lagwatch.rules import RulesConfig

    file = Path(path)
    if not file.is_file():
        raise BacktestError(f"--config: no such file {path!r}")
    try:
        _check_yaml(file)
    except ConfigError as e:
        raise BacktestError(e.problems[0]) from None
    import yaml

    data = yaml.safe_load(file.read_text()) or {}
    if not isinstance(data, dict) or not ({"rules", "alerts"} & set(data)):
        raise BacktestError(f"--config {path}: needs a rules: or alerts: section")
    from pydantic import ValidationError

    try:
        rules = RulesConfig.model_validate(data.get("rules") or {}).model_dump(mode="json")
        alerts = AlertsConfig.model_validate(data.get("alerts") or {}).model_dump(mode="json")
    except ValidationError as e:
        err = e.errors()[0]
        section = "rules" if "rules" in data and not _valid(RulesConfig, data.get("rules")) else "alerts"
        where = ".".join(str(p) for p in (section, *err["loc"]))
        raise BacktestError(f"--config {path}: {where}: {str(err['msg']).removeprefix('Value error, ')}") from None
    return Candidate(file.stem, rules, alerts)


def _valid(model: Any, data: Any) -> bool:
    from pydantic import ValidationError

    try:
        model.model_validate(data or {})
        return True
    except ValidationError:
        return False


def _check_lake(path: str) -> str:
    """The lake's snapshots directory, as Spark reads it; BacktestError when it is not there."""
    from lagwatch.lake.writer import open_filesystem

    try:
        from pyarrow import fs
    except ImportError:
        raise BacktestError("the backtest needs the spark extra: pip install 'lagwatch[spark]'") from None
    try:
        filesystem, root = open_filesystem(path)
        info = filesystem.get_file_info(f"{root}/snapshots")
    except Exception as e:
        raise BacktestError(f"--lake {path}: cannot open it: {str(e).splitlines()[0]}") from None
    if info.type != fs.FileType.Directory:
        raise BacktestError(f"--lake {path}: no lake there (no snapshots/ directory)")
    from lagwatch.pipeline.lake_read import spark_uri

    return spark_uri(path) if "://" in path else os.path.abspath(path)  # as Spark names it (s3:// is s3a://)


def _params(spark: Any, lake: str, until: float | None) -> dict[str, ClusterParams]:
    """Per cluster, the latest configuration recorded (before `until`)."""
    from pyspark.sql import functions as F

    from lagwatch.pipeline.lake_read import read_config

    try:  # the declared schema: `cluster=123` is a name, whatever the session infers
        df = read_config(spark, lake)
    except Exception:  # no config dataset: a lake written by hand, or without a daemon start
        return {}
    if until is not None:
        df = df.where(F.col("recorded_at") <= until)
    out: dict[str, ClusterParams] = {}
    for r in df.orderBy("recorded_at").collect():
        out[r["cluster"]] = ClusterParams(
            float(r["max_gap_s"]), bool(r["read_committed"]), json.loads(r["rules_json"]), json.loads(r["alerts_json"])
        )
    return out


def run_backtest(
    lake: str,
    configs: Sequence[str],
    output: str,
    since: float | None = None,
    until: float | None = None,
    spark: Any = None,
) -> Any:
    """The whole job; returns the result as a pandas DataFrame (also written under `output`)."""
    started = time.monotonic()
    candidates = [load_candidate(c) for c in (configs or [RECORDED])]
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise BacktestError(f"--config: two candidates named alike ({', '.join(names)}): rename a file")
    if since is not None and until is not None and since >= until:
        raise BacktestError("--since must be before --until")
    lake_path = _check_lake(lake)
    if spark is None:
        from lagwatch.pipeline.session import spark_session

        _say("starting Spark")
        spark = spark_session(app="lagwatch-backtest", kafka=False)
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")  # cluster=123 is a name
    from lagwatch.lake.codec import SNAPSHOT_COLUMNS
    from lagwatch.pipeline.lake_read import read_snapshots

    df = read_snapshots(spark, lake_path, since, until)
    df = df.select("cluster", *[c for c in SNAPSHOT_COLUMNS if c not in ("poll_time", "schema_version")])
    _say(f"reading {lake_path}")
    counts = (
        df.where(F.col("row_kind") == "poll")
        .groupBy("cluster")
        .agg(F.count("*").alias("polls"), F.min("taken_at").alias("first"), F.max("taken_at").alias("last"))
        .orderBy("cluster")
        .collect()
    )
    if not counts:
        raise BacktestError(f"no snapshots in {lake} {_range_text(since, until)}")
    for r in counts:
        _say(f"cluster {r['cluster']}: {r['polls']} polls, {_iso(r['first'])} .. {_iso(r['last'])}")
    params = _params(spark, lake_path, until)
    if any(c.rules is None for c in candidates):
        missing = [r["cluster"] for r in counts if r["cluster"] not in params]
        if missing:
            raise BacktestError(f"no recorded configuration for cluster(s) {', '.join(missing)}: pass --config FILE")
    for r in counts:
        if r["cluster"] not in params:
            _say(f"cluster {r['cluster']}: no recorded settings, assuming max_gap_s={DEFAULT_MAX_GAP_S}")
    schema = ", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())
    _say(f"replaying {len(counts)} cluster(s) under {len(candidates)} config(s): {', '.join(names)}")
    result = df.groupBy("cluster").applyInPandas(_executor(candidates, params), schema=schema)
    result.write.mode("overwrite").partitionBy("config").parquet(output)
    pdf = spark.read.parquet(output).toPandas()
    _say(f"wrote {output} ({len(pdf)} rows) in {time.monotonic() - started:.1f} s")
    print(summary(pdf, names))
    return pdf


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _range_text(since: float | None, until: float | None) -> str:
    if since is None and until is None:
        return "(the lake is empty)"
    return f"between {_iso(since) if since else 'the start'} and {_iso(until) if until else 'the end'}"


def summary(pdf: Any, names: Sequence[str]) -> str:
    """The configs side by side: alerts by severity and rule, groups alerted most, pages per day, and how long a
    condition took to become an alert."""
    import pandas as pd

    alerts = pdf[pdf["kind"] == "alert"]
    notes = pdf[pdf["kind"] == "notification"]
    pages = notes[notes["notification_kind"] == "firing"]
    lines = ["", "== backtest =="]

    def table(title: str, frame: Any) -> None:
        frame = frame.reindex(columns=list(names), fill_value=0)
        lines.append(f"\n{title}")
        lines.append(frame.to_string() if len(frame) else "  (none)")

    def counts(frame: Any, by: str) -> Any:
        if frame.empty:
            return pd.DataFrame(columns=list(names))
        return frame.groupby([by, "config"]).size().unstack("config", fill_value=0)

    table("alerts that fired, by severity", counts(alerts, "severity"))
    table("alerts by rule", counts(alerts, "rule"))
    by_group = counts(alerts.assign(group=alerts["group"].fillna("(cluster)")), "group")
    if len(by_group):
        by_group = by_group.loc[by_group.sum(axis=1).sort_values(ascending=False).index[:10]]
    table("alerts by group (top 10)", by_group)
    days = pages.assign(day=pd.to_datetime(pages["fired_at"], unit="s", utc=True).dt.strftime("%Y-%m-%d"))
    table("pages per day (first notification of an alert group)", counts(days, "day"))
    if alerts.empty:
        delay = pd.DataFrame(columns=list(names))
    else:
        delay = alerts.groupby("config")["condition_to_alert_s"].describe(percentiles=[0.5, 0.9])[
            ["count", "min", "50%", "90%", "max"]
        ]
        delay = delay.T
    table("seconds from condition to alert", delay)
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------------------------


def add_backtest_command(subparsers: Any) -> argparse.ArgumentParser:
    """`lagwatch ... backtest`: registers the subcommand on an argparse subparsers object."""
    parser = subparsers.add_parser("backtest", help="replay the lake under candidate configs (Spark)")
    _arguments(parser)
    parser.set_defaults(func=_cmd_backtest)
    return parser  # type: ignore[no-any-return]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", default="lake", help="the lake's path or URI (default: ./lake)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="a candidate config (rules: and alerts:); repeat to compare; 'recorded' (default) is what the daemon ran",
    )
    parser.add_argument("--since", type=_time_arg, help="ISO time or date, UTC unless it says (default: the start)")
    parser.add_argument("--until", type=_time_arg, help="ISO time or date, exclusive (default: the end)")
    parser.add_argument("--output", default="backtest-out", help="Parquet output directory (replaced)")
    parser.add_argument("--master", default=None, help="Spark master (default: local[2]; spark-submit's own)")


def _cmd_backtest(args: argparse.Namespace) -> int:
    spark = None
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # under spark-submit: its master and settings
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("lagwatch-backtest").getOrCreate()
    elif args.master is not None:
        from lagwatch.pipeline.session import spark_session

        _say(f"starting Spark ({args.master})")
        spark = spark_session(master=args.master, app="lagwatch-backtest", kafka=False)
    try:
        run_backtest(args.lake, args.config, args.output, args.since, args.until, spark)
    except LagwatchError:
        raise
    except Exception as e:  # a Spark or Py4J failure (an unreadable file, an unknown scheme...): one line
        from lagwatch.pipeline.jobs import spark_error

        raise LagwatchError(f"the Spark job failed: {spark_error(e)}") from None
    return 0


# What `lagwatch pipeline` expects of a job module (see lagwatch/pipeline/jobs.py).
add_arguments = _arguments
run_job = _cmd_backtest


def main(argv: list[str] | None = None) -> int:
    from lagwatch.pipeline.jobs import run_main

    return run_main("lagwatch pipeline backtest", _arguments, _cmd_backtest, argv)


if __name__ == "__main__":
    sys.exit(main())
