"""`backtest`: replays the lake under candidate configurations and reports the alerts each would have raised.

    lake snapshots (time range) -> per cluster, or per cluster and candidate (one task each, in parallel on Spark):
        the cluster's rows, sorted by time within the task's partition, streamed in Arrow batches (mapInArrow)
        -> ClusterSnapshots poll by poll -> the daemon's own ClusterPipeline.step, per candidate config
    -> every alert that would have fired (start, end, rule, severity, peak lag, condition-to-alert time) and every
       notification (pages), as Parquet under --output, and a summary with the configs side by side.

A task holds one Arrow batch, one poll and the pipelines' state, never a cluster's whole range (one pandas frame
per cluster took about 3 KB of Python worker memory per lake row: 3 GB for 8 hours of 1,000 group-partitions).
The executor function imports only the core, `lagwatch.lake.codec` (stdlib + model) and pyarrow (Spark's Arrow
batches), never the lake writer or the daemon. Run as `python -m lagwatch.pipeline.backtest ...`, `lagwatch backtest ...`, or with spark-submit on this
file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lagwatch.alerts import AlertState
from lagwatch.errors import ConfigError, LagwatchError
from lagwatch.pipeline.lake_read import ClusterParams, ParamsTimeline, check_lake, recorded_params
from lagwatch.pipeline.times import iso, range_text, time_arg

if TYPE_CHECKING:
    from lagwatch.lake.codec import ReplayPoll

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
CANDIDATE = "_candidate"  # which candidate a task replays, when the driver splits a cluster's replay by candidate
SLOT = "_slot"  # the partition a task's rows go to
OUTPUT_BATCH_ROWS = 10_000


class BacktestError(LagwatchError):
    exit_code = 2


@dataclass(frozen=True)
class Candidate:
    name: str
    rules: Mapping[str, Any] | None  # None: the recorded configuration of each cluster
    alerts: Mapping[str, Any] | None


# -- the replay (runs on the executors; core only) ------------------------------------------------------------------


class Replayer:
    """The daemon's step folded over one cluster's snapshots under one candidate, one poll at a time: the alert
    and notification rows it produces. Holds only the pipeline's own state, never the snapshots."""

    def __init__(self, cluster: str, candidate: Candidate, timeline: ParamsTimeline) -> None:
        from lagwatch.alerts import AlertBook
        from lagwatch.alerts.transitions import TransitionTracker
        from lagwatch.step import ClusterPipeline

        self.candidate = candidate
        self.timeline = timeline
        self.book = AlertBook(self._alerts_config(timeline[0]))
        self.book.load_config_silences()
        self.pipeline = ClusterPipeline.build(cluster, self._resolver(timeline[0]), self.book)
        self._apply(timeline[0])
        self._next = 1
        self.tracker = TransitionTracker(cluster)
        self.open_alerts: dict[str, dict[str, Any]] = {}
        self.base = {"config": candidate.name, "cluster": cluster}

    def _alerts_config(self, params: ClusterParams) -> Any:
        from lagwatch.alerts import AlertsConfig

        return AlertsConfig.model_validate(
            self.candidate.alerts if self.candidate.alerts is not None else params.alerts
        )

    def _resolver(self, params: ClusterParams) -> Any:
        from lagwatch.rules import RuleResolver, RulesConfig

        return RuleResolver(
            RulesConfig.model_validate(self.candidate.rules if self.candidate.rules is not None else params.rules)
        )

    def _apply(self, params: ClusterParams, now: float = -math.inf) -> None:
        """The configuration in force from `params.recorded_at` on, as a daemon restarted with it takes it up: its
        history and alerts go on, judged by the new rules and lifecycle (`recorded` replayed the whole range under
        the last configuration recorded: a threshold raised later moved every earlier alert)."""
        from lagwatch.history.store import MAX_SAMPLES

        first = params is self.timeline[0]
        resolver = self.pipeline.resolver if first else self._resolver(params)
        if not first:
            self.book.config = self._alerts_config(params)
            self.book._group_keys.clear()  # group_by may have changed
            self.book.load_config_silences()
            # As a restart does (lagwatch.alerts.restart): labels the new configuration gives otherwise end, and
            # their incidents go on.
            self.book.relabel(lambda a: resolver.labels(a.cluster, a.group, a.labels.get("topic")), now)
        # The daemon's own sizing, from the poll interval the lake recorded. A lake written before it was read back:
        # max_gap_s is twice the interval plus the request timeout, so a quarter of it is shorter than the interval,
        # and the rings keep at least the polls the daemon kept (more is harmless).
        interval = params.poll_interval_s or max(1.0, params.max_gap_s / 4)
        self.pipeline.configure(
            resolver,
            poll_interval_s=interval,
            max_gap_s=params.max_gap_s,
            read_committed=params.read_committed,
            keep_at_least=MAX_SAMPLES if first else max(MAX_SAMPLES, self.pipeline.history.keep),
        )

    @classmethod
    def of(cls, cluster: str, candidate: Candidate, params: ClusterParams | ParamsTimeline) -> Replayer | None:
        """None when the candidate is `recorded` and the cluster has no recorded configuration (checked on the
        driver)."""
        timeline = [params] if isinstance(params, ClusterParams) else list(params)
        if not timeline:
            return None
        for p in timeline:
            rules = candidate.rules if candidate.rules is not None else p.rules
            alerts = candidate.alerts if candidate.alerts is not None else p.alerts
            if rules is None or alerts is None:
                return None
        return cls(cluster, candidate, timeline)

    def step(self, poll: ReplayPoll) -> list[dict[str, Any]]:
        """One recorded poll: the `__consumer_offsets` records folded in just before it, then the snapshot."""
        out: list[dict[str, Any]] = []
        base = self.base
        snapshot = poll.snapshot
        timeline = self.timeline
        while self._next < len(timeline) and timeline[self._next].recorded_at <= snapshot.taken_at:
            self._apply(timeline[self._next], snapshot.taken_at)
            self._next += 1
        evaluation = self.pipeline.step(snapshot, poll.records, poll.records_caught_up)
        for t in self.tracker.observe(self.book, evaluation.now):
            if t.transition == AlertState.FIRING:
                self.open_alerts[t.key] = {
                    **base,
                    "kind": "alert",
                    **t.alert_row(),
                    "condition_to_alert_s": t.fired_at - t.started_at,
                }
            else:
                row = self.open_alerts.pop(t.key, None)
                if row is not None:
                    out.append(
                        {**row, "resolved_at": t.resolved_at, "peak_lag": t.peak_lag, "max_severity": t.severity.value}
                    )
        for n in self.pipeline.due(snapshot.taken_at):
            out.append(
                {
                    **base,
                    "kind": "notification",
                    "key": n.group_key,
                    "rule": ",".join(sorted({a.rule for a in n.firing})),
                    "severity": n.severity_text,
                    "group": n.group_labels.get("group") or None,
                    "labels_json": json.dumps(n.group_labels, sort_keys=True),
                    "fired_at": n.created_at,
                    "notification_kind": n.kind.value,
                }
            )
        return out

    def finish(self) -> list[dict[str, Any]]:
        """The alerts still firing when the range ends."""
        out = []
        for key, row in self.open_alerts.items():
            seen = self.tracker.firing.get(key)
            out.append(
                {**row, "peak_lag": seen.peak_lag if seen else None, "max_severity": seen.worst.value if seen else None}
            )
        self.open_alerts = {}
        return out


def replay(
    cluster: str,
    rows: Iterable[Mapping[str, Any]],
    candidates: Sequence[Candidate],
    params: ClusterParams | ParamsTimeline,
) -> list[dict[str, Any]]:
    """Folds the daemon's step over one cluster's polls (rows in any order, all in memory), once per candidate;
    alert and notification rows. The Spark job streams instead (`_stream_executor`)."""
    from lagwatch.lake.codec import polls_from_rows

    polls = polls_from_rows(cluster, rows)
    out: list[dict[str, Any]] = []
    for candidate in candidates:
        replayer = Replayer.of(cluster, candidate, params)
        if replayer is None:
            continue
        for poll in polls:
            out += replayer.step(poll)
        out += replayer.finish()
    return out


def _output_arrow_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "double": pa.float64(), "long": pa.int64()}
    return pa.schema([pa.field(name, types[kind]) for name, kind in OUTPUT_COLUMNS.items()])


def _stream_executor(
    candidates: Sequence[Candidate], params: Mapping[str, ParamsTimeline]
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """For mapInArrow over a partition sorted by (cluster, candidate, taken_at, ordinal): the rows arrive in Arrow
    batches, one poll's rows are gathered, decoded (the codec, as before) and stepped through each candidate's
    pipeline, then dropped. Memory: one batch, one poll and the pipelines' own state, whatever the range.

    `CANDIDATE` (when present) says which candidate the rows are for: the driver may send a cluster's rows to
    several tasks, one per candidate, so that one big cluster still uses several cores."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from lagwatch.lake.codec import polls_from_rows

        schema = _output_arrow_schema()
        out: list[dict[str, Any]] = []
        replayers: list[Replayer] = []
        key: tuple[str, int] | None = None
        done: set[tuple[str, int]] = set()
        poll: list[dict[str, Any]] = []
        poll_t = -math.inf

        def step_poll() -> None:
            if poll and key is not None:
                # The codec gathers rows by `taken_at` and orders them by `ordinal`, exactly as for a whole cluster.
                for recorded in polls_from_rows(key[0], poll):
                    for r in replayers:
                        out.extend(r.step(recorded))
            poll.clear()

        def finish() -> None:
            step_poll()
            for r in replayers:
                out.extend(r.finish())
            replayers.clear()

        for batch in batches:
            names = batch.schema.names
            columns = batch.to_pydict()
            clusters = columns["cluster"]
            tasks = columns.pop(CANDIDATE, None)
            names = [n for n in names if n != CANDIDATE]
            times = columns["taken_at"]
            for i, values in enumerate(zip(*(columns[n] for n in names), strict=True)):
                row_key = (clusters[i], tasks[i] if tasks is not None else -1)
                t = times[i]
                if row_key != key:
                    finish()
                    if row_key in done:
                        raise RuntimeError(f"backtest: rows of {row_key} are not contiguous (the sort was lost)")
                    done.add(row_key)
                    key, poll_t = row_key, -math.inf
                    cluster_params = params.get(key[0]) or [ClusterParams(DEFAULT_MAX_GAP_S, False, None, None)]
                    chosen = candidates if key[1] < 0 else [candidates[key[1]]]
                    replayers[:] = [
                        r for r in (Replayer.of(key[0], c, cluster_params) for c in chosen) if r is not None
                    ]
                if t != poll_t:
                    if t < poll_t:
                        raise RuntimeError(f"backtest: rows of {key[0]} out of time order (the sort was lost)")
                    step_poll()
                    poll_t = t
                poll.append(dict(zip(names, values, strict=True)))
            if len(out) >= OUTPUT_BATCH_ROWS:
                yield pa.RecordBatch.from_pylist(out, schema=schema)
                out.clear()
        finish()
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=schema)

    return run


def plan_tasks(polls: Mapping[str, int], candidates: int, slots: int) -> tuple[bool, dict[tuple[str, int], int]]:
    """Which task replays what, and on which of `slots` partitions: (by candidate?, (cluster, candidate or -1) ->
    slot). A cluster's replay is sequential, so with fewer clusters than slots each candidate gets its own task
    (the cluster's rows are then shuffled once per candidate). Tasks are placed largest first on the emptiest slot,
    as hashing a handful of keys onto a handful of partitions often puts two on one."""
    by_candidate = candidates > 1 and len(polls) < slots
    tasks = [(c, i) for c in polls for i in (range(candidates) if by_candidate else [-1])]
    load = [0] * min(slots, len(tasks))
    placed: dict[tuple[str, int], int] = {}
    for task in sorted(tasks, key=lambda k: (-polls[k[0]], k)):
        slot = min(range(len(load)), key=lambda s: (load[s], s))
        placed[task] = slot
        load[slot] += polls[task[0]]
    return by_candidate, placed


def _slot_values(spark: Any, slots: int) -> list[int]:
    """For each partition 0..slots-1, a number that `repartition(slots, col)` sends there: Spark hashes the column
    (Murmur3, `pmod(hash(x), slots)`), so the numbers are found by asking Spark the same expression."""
    from pyspark.sql import functions as F

    found: dict[int, int] = {}
    for r in spark.range(64 * slots).select("id", F.expr(f"pmod(hash(id), {slots})").alias("p")).collect():
        found.setdefault(int(r["p"]), int(r["id"]))
    return [found[s] for s in range(slots)]


def replay_on_spark(
    spark: Any, df: Any, candidates: Sequence[Candidate], params: Mapping[str, ParamsTimeline], polls: Mapping[str, int]
) -> Any:
    """The replay as a DataFrame of OUTPUT_COLUMNS: each task streams its cluster's rows in time order."""
    from pyspark.sql import functions as F

    slots = max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    by_candidate, placed = plan_tasks(polls, len(candidates), slots)
    nslots = max(placed.values()) + 1
    values = _slot_values(spark, nslots)
    if by_candidate:
        df = df.withColumn(CANDIDATE, F.explode(F.array(*[F.lit(i) for i in range(len(candidates))])))
        task = F.concat_ws("/", F.col("cluster"), F.col(CANDIDATE).cast("string"))
        names = {f"{c}/{i}": values[s] for (c, i), s in placed.items()}
    else:
        task = F.col("cluster")
        names = {c: values[s] for (c, _), s in placed.items()}
    slot_of = F.create_map(*[x for name, v in names.items() for x in (F.lit(name), F.lit(v))])
    order = ["cluster", *([CANDIDATE] if by_candidate else []), "taken_at", "ordinal"]
    streamed = df.withColumn(SLOT, slot_of[task]).repartition(nslots, SLOT).sortWithinPartitions(*order).drop(SLOT)
    schema = ", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())
    return streamed.mapInArrow(_stream_executor(candidates, params), schema=schema)


# -- the driver ---------------------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"backtest: {message}", file=sys.stderr, flush=True)


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
        data = _check_yaml(file) or {}  # read as the daemon reads it (a 5,000-digit number was a traceback)
    except ConfigError as e:
        raise BacktestError(e.problems[0]) from None
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


# What a backtest writes in its output directory; anything else there is not its own to replace.
_OUTPUT_ENTRIES = ("_SUCCESS", "._SUCCESS.crc")


def _check_output(output: str, lake: str) -> None:
    """Spark replaces the output directory whole: one that held the lake (`--output` at or above `--lake`) deleted
    the lake and everything beside it, and exited 0. A local output must be new, empty, or an earlier backtest's
    output; never the lake, inside it, or above it. BacktestError otherwise."""
    if "://" in output and not output.startswith("file:"):
        if output.rstrip("/") == lake.rstrip("/") or lake.startswith(output.rstrip("/") + "/"):
            raise BacktestError(f"--output {output}: the lake is there; the backtest replaces its output directory")
        return
    out = Path(output.removeprefix("file://").removeprefix("file:")).resolve()
    lake_dir = Path(lake.removeprefix("file://").removeprefix("file:")).resolve()
    if out == lake_dir or out in lake_dir.parents or lake_dir in out.parents:
        raise BacktestError(
            f"--output {output}: the lake is {'inside it' if out in lake_dir.parents else 'there'}; the backtest "
            "replaces its output directory: choose a new one"
        )
    if out.exists() and not out.is_dir():
        raise BacktestError(f"--output {output}: not a directory")
    if out.is_dir():
        others = sorted(
            e.name for e in out.iterdir() if e.name not in _OUTPUT_ENTRIES and not e.name.startswith("config=")
        )
        if others:
            raise BacktestError(
                f"--output {output}: holds other files ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
                "the backtest replaces its output directory: choose a new or empty one"
            )


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
    lake_path = check_lake(lake, "backtest", BacktestError)
    _check_output(output, lake_path)
    if spark is None:
        from lagwatch.pipeline.session import spark_session

        _say("starting Spark")
        spark = spark_session(app="lagwatch-backtest", kafka=False)

    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")  # cluster=123 is a name
    from lagwatch.lake.codec import SNAPSHOT_COLUMNS
    from lagwatch.pipeline.lake_read import polls_per_cluster, read_snapshots

    df = read_snapshots(spark, lake_path, since, until)
    df = df.select("cluster", *[c for c in SNAPSHOT_COLUMNS if c not in ("poll_time", "schema_version")])
    _say(f"reading {lake_path}")
    counts = polls_per_cluster(df)
    if not counts:
        raise BacktestError(f"no snapshots in {lake} {range_text(since, until)}")
    for r in counts:
        _say(f"cluster {r['cluster']}: {r['polls']} polls, {iso(r['first'])} .. {iso(r['last'])}")
    params = recorded_params(spark, lake_path, until)
    if any(c.rules is None for c in candidates):
        missing = [r["cluster"] for r in counts if r["cluster"] not in params]
        if missing:
            raise BacktestError(f"no recorded configuration for cluster(s) {', '.join(missing)}: pass --config FILE")
    for r in counts:
        if r["cluster"] not in params:
            _say(f"cluster {r['cluster']}: no recorded settings, assuming max_gap_s={DEFAULT_MAX_GAP_S}")
    schema = ", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())
    _say(f"replaying {len(counts)} cluster(s) under {len(candidates)} config(s): {', '.join(names)}")
    result = replay_on_spark(spark, df, candidates, params, {r["cluster"]: int(r["polls"]) for r in counts})
    result.write.mode("overwrite").partitionBy("config").parquet(output)
    # With the schema: a range where nothing fires writes no files, and Spark cannot infer a schema from none.
    pdf = spark.read.schema(schema).parquet(output).toPandas()
    _say(f"wrote {output} ({len(pdf)} rows) in {time.monotonic() - started:.1f} s")
    print(summary(pdf, names))
    return pdf


def summary(pdf: Any, names: Sequence[str]) -> str:
    """The configs side by side: alerts by severity and rule, groups alerted most, pages per day, and how long a
    condition took to become an alert."""
    import pandas as pd  # type: ignore[import-untyped]

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
    parser.add_argument("--since", type=time_arg, help="ISO time or date, UTC unless it says (default: the start)")
    parser.add_argument("--until", type=time_arg, help="ISO time or date, exclusive (default: the end)")
    parser.add_argument("--output", default="backtest-out", help="Parquet output directory (replaced)")
    parser.add_argument("--master", default=None, help="Spark master (default: local[2]; spark-submit's own)")


def _cmd_backtest(args: argparse.Namespace) -> int:
    from lagwatch.pipeline.jobs import default_master

    default_master(args.master)  # a master Spark would not take: said before anything starts
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
