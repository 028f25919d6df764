"""`backtest`: replays the lake under candidate configurations and reports the alerts each would have raised.

    lake snapshots (time range) -> per cluster, or per cluster and candidate (one task each, in parallel on Spark):
        the cluster's rows, sorted by time within the task's partition, streamed in Arrow batches (mapInArrow)
        -> ClusterSnapshots poll by poll -> the daemon's own ClusterPipeline.step, per candidate config
    -> every alert that would have fired (start, end, rule, severity, peak lag, condition-to-alert time) and every
       notification, as Parquet under --output, and a summary with the configs side by side
    -> on the driver, each config's incidents beside the ones the daemon raised (the lake's alert transitions): per
       rule and severity, gained, lost, pages, fire times (lagwatch.pipeline.whatif), printed and as Parquet.

A candidate file is an overlay on the configuration each cluster recorded (at each time one was recorded):
`rules: lag:` alone changes the lag rule and nothing else.

A task holds one Arrow batch, one poll and the pipelines' state, never a cluster's whole range (one pandas frame
per cluster took about 3 KB of Python worker memory per lake row: 3 GB for 8 hours of 1,000 group-partitions).
The executor function imports only the core, `lagwatch.lake.codec` (stdlib + model) and pyarrow (Spark's Arrow
batches), never the lake writer or the daemon. Run as `python -m lagwatch.pipeline.backtest ...`, `lagwatch backtest ...`, or with spark-submit on this
file.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lagwatch.alerts import AlertState
from lagwatch.errors import ConfigError, LagwatchError
from lagwatch.lake.settings import is_s3
from lagwatch.pipeline.lake_read import ClusterParams, ParamsTimeline, check_lake, lake_format, recorded_params
from lagwatch.pipeline.times import iso, range_text, time_arg
from lagwatch.pipeline.whatif import (
    CandidateTotals,
    Difference,
    Incident,
    Match,
    RecordedTransition,
    RuleComparison,
    compare,
    difference_lines,
    differences,
    leaves,
    match,
    overlay,
    ranking_lines,
    recorded_incidents,
    table_lines,
    totals,
)

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
CANDIDATE = "_candidate"  # which group of candidates a task replays, when the driver splits a cluster's replay
SLOT = "_slot"  # the partition a task's rows go to
OUTPUT_BATCH_ROWS = 10_000


class BacktestError(LagwatchError):
    exit_code = 2


@dataclass(frozen=True)
class Candidate:
    """A configuration to replay: `recorded` (no path), or a file's `rules:` and `alerts:` as overlays on the
    configuration each cluster recorded (a section left out: the recorded one as it is)."""

    name: str
    rules: Mapping[str, Any] | None  # the overlay; None: the recorded section as it is
    alerts: Mapping[str, Any] | None
    path: str | None = None  # None: `recorded`, exactly what the daemon ran with

    @property
    def recorded(self) -> bool:
        return self.path is None


@cache
def _defaults() -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """lagwatch's default rules and alerts, as a daemon records them: what an overlay goes on where a cluster
    recorded no configuration."""
    from lagwatch.alerts import AlertsConfig
    from lagwatch.rules import RulesConfig

    return RulesConfig().model_dump(mode="json"), AlertsConfig().model_dump(mode="json")


def candidate_config(
    candidate: Candidate, params: ClusterParams
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The rules and alerts a candidate replays with from `params.recorded_at` on: the recorded ones (None where
    none was recorded) for `recorded`, else its overlays deep-merged on them (or on the defaults)."""
    if candidate.recorded:
        return params.rules, params.alerts
    rules, alerts = _defaults()
    return (
        overlay(params.rules if params.rules is not None else rules, candidate.rules or {}),
        overlay(params.alerts if params.alerts is not None else alerts, candidate.alerts or {}),
    )


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

        return AlertsConfig.model_validate(candidate_config(self.candidate, params)[1])

    def _resolver(self, params: ClusterParams) -> Any:
        from lagwatch.rules import RuleResolver, RulesConfig

        return RuleResolver(RulesConfig.model_validate(candidate_config(self.candidate, params)[0]))

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
            rules, alerts = candidate_config(candidate, p)
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
    candidates: Sequence[Candidate],
    params: Mapping[str, ParamsTimeline],
    groups: Sequence[Sequence[int]] | None = None,
    progress_dir: str | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """For mapInArrow over a partition sorted by (cluster, candidate, taken_at, ordinal): the rows arrive in Arrow
    batches, one poll's rows are gathered, decoded (the codec, as before) and stepped through each candidate's
    pipeline, then dropped. Memory: one batch, one poll and the pipelines' own state, whatever the range.

    `CANDIDATE` (when present) says which group of candidates (`groups`, plan_tasks) the rows are for: the driver
    may send a cluster's rows to several tasks, one per group, so that one big cluster still uses several cores.
    `progress_dir`: where each task writes how many polls it replayed, for the driver to show (`_Progress`)."""

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

        stepped = [0]  # polls replayed by this task
        written_at = [time.monotonic()]  # when its progress was last written

        def step_poll() -> None:
            if poll and key is not None:
                # The codec gathers rows by `taken_at` and orders them by `ordinal`, exactly as for a whole cluster.
                for recorded in polls_from_rows(key[0], poll):
                    for r in replayers:
                        out.extend(r.step(recorded))
                stepped[0] += 1
                if progress_dir is not None and time.monotonic() - written_at[0] >= PROGRESS_WRITE_S:
                    written_at[0] = time.monotonic()
                    _write_progress(progress_dir, key, stepped[0])
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
                    if key is not None and progress_dir is not None:
                        _write_progress(progress_dir, key, stepped[0])
                    stepped[0] = 0
                    if row_key in done:
                        raise RuntimeError(f"backtest: rows of {row_key} are not contiguous (the sort was lost)")
                    done.add(row_key)
                    key, poll_t = row_key, -math.inf
                    cluster_params = params.get(key[0]) or [ClusterParams(DEFAULT_MAX_GAP_S, False, None, None)]
                    chosen = candidates if key[1] < 0 or groups is None else [candidates[j] for j in groups[key[1]]]
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
        if key is not None and progress_dir is not None:
            _write_progress(progress_dir, key, stepped[0])
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=schema)

    return run


# How often a task writes its progress, and the driver shows the job's. A week's backtest runs for an hour with
# nothing else to show: Spark's own bars are off (they overwrote lagwatch's lines), and its stage has 2 tasks.
PROGRESS_WRITE_S = 5.0
PROGRESS_SHOW_S = 30.0


def _write_progress(directory: str, key: tuple[str, int], polls: int) -> None:
    """A task's polls replayed so far, in a file of its own (replaced whole). An executor on another machine has no
    such directory: nothing is written, and the driver says only how long the job has run."""
    name = hashlib.sha256(f"{key[0]}/{key[1]}".encode()).hexdigest()[:16]
    path = os.path.join(directory, name)
    with contextlib.suppress(OSError):
        with open(f"{path}.tmp", "w") as f:
            f.write(str(polls))
        os.replace(f"{path}.tmp", path)


class _Progress:
    """While the replay runs: every PROGRESS_SHOW_S, the polls the tasks replayed of all they have to (read from
    the files `_write_progress` leaves in `directory`), and the time left at that pace."""

    def __init__(self, directory: str, total_polls: int) -> None:
        self.directory, self.total = directory, total_polls
        self.started = time.monotonic()
        self.shown = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backtest-progress", daemon=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.shown:  # the end of what was shown (a short job shows nothing)
            _say(self.line())

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_SHOW_S):
            _say(self.line())
            self.shown = True

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        done = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if not entry.name.endswith(".tmp"):
                    with contextlib.suppress(OSError, ValueError):
                        done += int(Path(entry.path).read_text())
        if not done:
            return f"replaying ({elapsed / 60:.1f} min so far)"
        left = elapsed * max(0, self.total - done) / done
        return (
            f"replayed {done:,} of {self.total:,} polls ({100 * done / self.total:.0f}%) in {elapsed / 60:.1f} min"
            + (f", about {left / 60:.0f} min left" if done < self.total else "")
        )


def plan_tasks(
    polls: Mapping[str, int], candidates: int, slots: int
) -> tuple[list[list[int]] | None, dict[tuple[str, int], int]]:
    """Which task replays what, and on which of `slots` partitions: (candidate groups or None, (cluster, group or
    -1) -> slot). A cluster's replay is sequential, so with fewer clusters than slots the candidates are split
    into as many groups as each cluster has slots, a task each: the cluster's rows are shuffled and sorted once per
    group, and each poll decoded once for the group's candidates. (A copy per candidate sorted 5 copies of a week
    at 10,000 group-partitions, 110 M rows, on 2 slots: the sort's spill merge ran out of a 1 GB heap, and every
    poll was decoded 5 times.) Tasks are placed largest first on the emptiest slot, as hashing a handful of keys
    onto a handful of partitions often puts two on one."""
    split = min(candidates, slots // max(1, len(polls)))
    groups = [list(range(i, candidates, split)) for i in range(split)] if split > 1 else None
    tasks = [(c, i) for c in polls for i in (range(len(groups)) if groups else [-1])]

    def weight(task: tuple[str, int]) -> int:
        return polls[task[0]] * (len(groups[task[1]]) if groups else candidates)

    load = [0] * min(slots, len(tasks))
    placed: dict[tuple[str, int], int] = {}
    for task in sorted(tasks, key=lambda k: (-weight(k), k)):
        slot = min(range(len(load)), key=lambda s: (load[s], s))
        placed[task] = slot
        load[slot] += weight(task)
    return groups, placed


def _slot_values(spark: Any, slots: int) -> list[int]:
    """For each partition 0..slots-1, a number that `repartition(slots, col)` sends there: Spark hashes the column
    (Murmur3, `pmod(hash(x), slots)`), so the numbers are found by asking Spark the same expression."""
    from pyspark.sql import functions as F

    found: dict[int, int] = {}
    for r in spark.range(64 * slots).select("id", F.expr(f"pmod(hash(id), {slots})").alias("p")).collect():
        found.setdefault(int(r["p"]), int(r["id"]))
    return [found[s] for s in range(slots)]


def replay_on_spark(
    spark: Any,
    df: Any,
    candidates: Sequence[Candidate],
    params: Mapping[str, ParamsTimeline],
    polls: Mapping[str, int],
    progress_dir: str | None = None,
) -> Any:
    """The replay as a DataFrame of OUTPUT_COLUMNS: each task streams its cluster's rows in time order."""
    from pyspark.sql import functions as F

    slots = max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    groups, placed = plan_tasks(polls, len(candidates), slots)
    by_candidate = groups is not None
    nslots = max(placed.values()) + 1
    values = _slot_values(spark, nslots)
    if groups is not None:
        df = df.withColumn(CANDIDATE, F.explode(F.array(*[F.lit(i) for i in range(len(groups))])))
        task = F.concat_ws("/", F.col("cluster"), F.col(CANDIDATE).cast("string"))
        names = {f"{c}/{i}": values[s] for (c, i), s in placed.items()}
    else:
        task = F.col("cluster")
        names = {c: values[s] for (c, _), s in placed.items()}
    slot_of = F.create_map(*[x for name, v in names.items() for x in (F.lit(name), F.lit(v))])
    order = ["cluster", *([CANDIDATE] if by_candidate else []), "taken_at", "ordinal"]
    streamed = df.withColumn(SLOT, slot_of[task]).repartition(nslots, SLOT).sortWithinPartitions(*order).drop(SLOT)
    schema = ", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())
    return streamed.mapInArrow(_stream_executor(candidates, params, groups, progress_dir), schema=schema)


# -- the driver ---------------------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"backtest: {message}", file=sys.stderr, flush=True)


def load_candidate(path: str) -> Candidate:
    """A YAML file with `rules:` and/or `alerts:` (a whole lagwatch config works; other sections are ignored), or
    `recorded`. Its sections are overlays on the recorded configuration, checked here as far as they can be alone
    (a value out of range, an unknown key), and over each recorded configuration once the lake is read
    (`check_candidates`). Invalid: BacktestError naming the file and the field."""
    if path == RECORDED:
        return Candidate(RECORDED, None, None)
    from lagwatch.config import _check_yaml

    file = Path(path)
    if not file.is_file():
        raise BacktestError(f"--config: no such file {path!r}")
    try:
        data = _check_yaml(file) or {}  # read as the daemon reads it (a 5,000-digit number was a traceback)
    except ConfigError as e:
        raise BacktestError(e.problems[0]) from None
    if not isinstance(data, dict) or not ({"rules", "alerts"} & set(data)):
        raise BacktestError(f"--config {path}: needs a rules: or alerts: section")
    sections: dict[str, Mapping[str, Any] | None] = {}
    for section in ("rules", "alerts"):
        value = data.get(section)
        if value is not None and not isinstance(value, dict):
            raise BacktestError(f"--config {path}: {section}: must be a mapping")
        sections[section] = value
    candidate = Candidate(file.stem, sections["rules"], sections["alerts"], path)
    # Alone, over the defaults: a problem at or under a value the file sets is the file's own, whatever was
    # recorded (said before Spark starts); one between values (critical_fraction below warning_fraction) may
    # depend on the recorded ones, and is judged over them.
    rules, alerts = _defaults()
    problem = config_problem(candidate, ClusterParams(DEFAULT_MAX_GAP_S, False, rules, alerts))
    if problem is not None:
        where, message, own = problem
        if own:
            raise BacktestError(f"--config {path}: {where}: {message}")
    return candidate


def config_problem(candidate: Candidate, params: ClusterParams) -> tuple[str, str, bool] | None:
    """The first problem of the candidate's configuration over `params`: (field, message, at or under a value the
    candidate sets itself?), or None when it validates."""
    from pydantic import ValidationError

    from lagwatch.alerts import AlertsConfig
    from lagwatch.rules import RulesConfig

    rules, alerts = candidate_config(candidate, params)
    for section, model, merged, own in (
        ("rules", RulesConfig, rules, candidate.rules),
        ("alerts", AlertsConfig, alerts, candidate.alerts),
    ):
        try:
            model.model_validate(merged)
        except ValidationError as e:
            err = e.errors()[0]
            loc = tuple(str(p) for p in err["loc"])
            set_here = any(loc[: len(leaf)] == leaf for leaf in leaves(own or {}))
            message = str(err["msg"]).removeprefix("Value error, ")
            return ".".join((section, *loc)), message, set_here
    return None


def check_candidates(
    candidates: Sequence[Candidate], params: Mapping[str, ParamsTimeline], clusters: Sequence[str]
) -> None:
    """Every candidate over every configuration recorded for the clusters replayed (or over the defaults where
    none was): BacktestError (one line, the file and the field) at the first that does not validate."""
    for candidate in candidates:
        if candidate.recorded:
            continue
        for cluster in clusters:
            for p in params.get(cluster) or [ClusterParams(DEFAULT_MAX_GAP_S, False, None, None)]:
                problem = config_problem(candidate, p)
                if problem is not None:
                    where, message, _ = problem
                    over = (
                        f"the configuration recorded for cluster {cluster} at {iso(p.recorded_at)}"
                        if p.rules is not None
                        else f"the defaults (cluster {cluster} recorded no configuration)"
                    )
                    raise BacktestError(f"--config {candidate.path}: {where}: {message} (merged over {over})")


def overlay_changes(candidate: Candidate, params: Mapping[str, ParamsTimeline], clusters: Sequence[str]) -> str:
    """`candidate X: overlay on the recorded configuration: rules.lag.warning.offsets 5000 -> 50000; ...`."""
    from lagwatch.pipeline.whatif import leaf_changes, overlay_line

    rules, alerts = _defaults()
    timelines = [list(params.get(c) or []) for c in clusters]
    recorded_rules = [p.rules if p.rules is not None else rules for t in timelines for p in t] or [rules]
    recorded_alerts = [p.alerts if p.alerts is not None else alerts for t in timelines for p in t] or [alerts]
    changes = [
        *leaf_changes("rules", candidate.rules or {}, recorded_rules),
        *leaf_changes("alerts", candidate.alerts or {}, recorded_alerts),
    ]
    return overlay_line(candidate.name, changes)


# What a backtest writes in its output directory; anything else there is not its own to replace.
_OUTPUT_ENTRIES = ("_SUCCESS", "._SUCCESS.crc", "_comparison", "_incidents")


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


@dataclass(frozen=True)
class Comparison:
    """One candidate's replay beside what the daemon raised (see lagwatch.pipeline.whatif)."""

    config: str
    recorded: bool  # the recorded configuration: `differences` says where the replay is not the daemon
    matches: list[Match]
    rules: list[RuleComparison]
    totals: CandidateTotals
    differences: list[Difference]  # worked out for `recorded` only: where the replay is not the daemon


@dataclass(frozen=True)
class BacktestResult:
    replay: Any  # pandas DataFrame of OUTPUT_COLUMNS, as written under --output
    comparisons: list[Comparison]
    before_range: list[Incident]  # the daemon's incidents that fired before the replayed range (not compared)
    overlays: list[str]  # per candidate file, what it changes in the recorded configuration
    open_note: str | None = None  # how the severity of the daemon's alerts cut by the range's end was taken


def run_backtest(
    lake: str,
    configs: Sequence[str],
    output: str,
    since: float | None = None,
    until: float | None = None,
    spark: Any = None,
) -> Any:
    """The whole job; returns the replay as a pandas DataFrame (also written under `output`)."""
    return backtest(lake, configs, output, since, until, spark).replay


def backtest(
    lake: str,
    configs: Sequence[str],
    output: str,
    since: float | None = None,
    until: float | None = None,
    spark: Any = None,
) -> BacktestResult:
    """The whole job: the replay, and each candidate beside what the daemon raised, printed and written under
    `output` (`_comparison/` and `_incidents/` beside the `config=` partitions)."""
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
        delta = lake_format(lake) == "delta"
        spark = spark_session(app="lagwatch-backtest", kafka=False, s3=is_s3(lake) or is_s3(output), delta=delta)

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
    clusters = [str(r["cluster"]) for r in counts]
    params = recorded_params(spark, lake_path, until)
    if any(c.recorded for c in candidates):
        missing = [c for c in clusters if c not in params]
        if missing:
            raise BacktestError(f"no recorded configuration for cluster(s) {', '.join(missing)}: pass --config FILE")
    for c in clusters:
        if c not in params:
            _say(f"cluster {c}: no recorded settings, assuming max_gap_s={DEFAULT_MAX_GAP_S} and the default config")
    check_candidates(candidates, params, clusters)
    overlays = [overlay_changes(c, params, clusters) for c in candidates if not c.recorded]
    for line in overlays:
        _say(line)
    schema = ", ".join(f"`{k}` {v}" for k, v in OUTPUT_COLUMNS.items())
    _say(f"replaying {len(clusters)} cluster(s) under {len(candidates)} config(s): {', '.join(names)}")
    polls = {r["cluster"]: int(r["polls"]) for r in counts}
    tasks, _ = plan_tasks(polls, len(candidates), max(1, int(spark.conf.get("spark.sql.shuffle.partitions"))))
    with tempfile.TemporaryDirectory(prefix="lagwatch-backtest-progress-") as progress_dir:
        result = replay_on_spark(spark, df, candidates, params, polls, progress_dir)
        with _Progress(progress_dir, sum(polls.values()) * (len(tasks) if tasks else 1)):
            result.write.mode("overwrite").partitionBy("config").parquet(output)
    # With the schema: a range where nothing fires writes no files, and Spark cannot infer a schema from none.
    pdf = spark.read.schema(schema).parquet(output).toPandas()
    _say(f"wrote {output} ({len(pdf)} rows) in {time.monotonic() - started:.1f} s")

    compared_at = time.monotonic()
    ranges = {str(r["cluster"]): (float(r["first"]), float(r["last"])) for r in counts}
    recorded = recorded_incidents(_recorded_transitions(spark, lake_path, since, until), ranges)
    daemon, open_note = _settled(recorded.compared, pdf, candidates)
    comparisons = [_compare(c, pdf, daemon, ranges, params) for c in candidates]
    _write_comparison(spark, output, comparisons)
    _say(
        f"compared with the {len(recorded.compared)} alert(s) the daemon raised in the range, in "
        f"{time.monotonic() - compared_at:.1f} s"
    )
    backtest_result = BacktestResult(pdf, comparisons, recorded.before_range, overlays, open_note)
    print(summary(pdf, names))
    print(comparison_text(backtest_result))
    return backtest_result


def _settled(daemon: list[Incident], pdf: Any, candidates: Sequence[Candidate]) -> tuple[list[Incident], str | None]:
    """The daemon's incidents, those still firing at the range's end with the severity they reached in it taken
    from the `recorded` replay when it ran (the lake records no escalation before a resolution); a line saying
    what was done, or what could not be."""
    from lagwatch.pipeline.whatif import settle_open

    cut = sum(1 for i in daemon if not i.severity_final)
    if not cut:
        return daemon, None
    if not any(c.recorded for c in candidates):
        return daemon, (
            f"{cut} of the daemon's alerts were still firing at the range's end: the lake records their severity at "
            "firing, not an escalation after it, so a page may show as gained where the daemon paged too; add "
            "--config recorded to take it from the replay of the daemon's configuration"
        )
    settled, n = settle_open(daemon, replayed_incidents(pdf, RECORDED))
    return settled, (
        f"{cut} of the daemon's alerts were still firing at the range's end: {n} took the highest severity they "
        "reached in it from the replay of the recorded configuration (the lake records no escalation before a "
        f"resolution){'' if n == cut else f'; {cut - n} the replay did not raise alike keep their severity at firing'}"
    )


def _recorded_transitions(spark: Any, lake: str, since: float | None, until: float | None) -> list[RecordedTransition]:
    """The daemon's alert transitions in the range, from the lake's `alerts` dataset (none: a lake without it)."""
    return transitions_of(alert_rows(spark, lake, since, until))


def alert_rows(spark: Any, lake: str, since: float | None, until: float | None) -> list[Any]:
    """The lake's `alerts` rows in the range, collected (none: a lake without the dataset)."""
    from lagwatch.pipeline.lake_read import read_alerts

    columns = ("cluster", "at", "transition", "key", "rule", "severity", "group", "labels_json", "fired_at",
               "resolved_at")  # fmt: skip
    try:  # not the summaries and details: a week of alerts brought whole to the driver
        return list(read_alerts(spark, lake, since, until).select(*columns).collect())
    except Exception as e:  # no alerts dataset: the daemon never raised one (or the lake was written by hand)
        if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
            return []
        raise


def transitions_of(rows: Iterable[Any]) -> list[RecordedTransition]:
    """The lake's alert rows as the comparison takes them."""
    return [
        RecordedTransition(
            str(r["cluster"]),
            float(r["at"]),
            str(r["transition"]),
            str(r["key"]),
            str(r["rule"]),
            str(r["severity"]),
            r["group"],
            _topic(r["labels_json"]),
            float(r["fired_at"]) if r["fired_at"] is not None else float(r["at"]),
            float(r["resolved_at"]) if r["resolved_at"] is not None else None,
        )
        for r in rows
    ]


def _topic(labels_json: str | None) -> str | None:
    try:
        topic = json.loads(labels_json or "{}").get("topic")
    except (ValueError, AttributeError):
        return None
    return topic if isinstance(topic, str) else None


def _number(value: Any) -> float | None:
    """A pandas cell as a float; None for null (NaN)."""
    return None if value is None or value != value else float(value)


def replayed_incidents(pdf: Any, config: str) -> list[Incident]:
    """The replay's alert rows of one config as incidents."""
    rows = pdf[(pdf["kind"] == "alert") & (pdf["config"] == config)].to_dict("records")
    return [
        Incident(
            str(r["cluster"]),
            r["group"] if isinstance(r["group"], str) else None,
            _topic(r["labels_json"]),
            str(r["rule"]),
            str(r["max_severity"] if isinstance(r["max_severity"], str) else r["severity"]),
            float(r["fired_at"]),
            _number(r["resolved_at"]),
            str(r["key"]),
        )
        for r in rows
    ]


def _compare(
    candidate: Candidate,
    pdf: Any,
    recorded: list[Incident],
    ranges: Mapping[str, tuple[float, float]],
    params: Mapping[str, ParamsTimeline],
) -> Comparison:
    matches = match(recorded, replayed_incidents(pdf, candidate.name))
    diffs: list[Difference] = []
    if candidate.recorded:
        from lagwatch.rules import RulesConfig

        warmup = {}
        for cluster, timeline in params.items():
            rules = [RulesConfig.model_validate(p.rules) for p in timeline if p.rules is not None]
            warmup[cluster] = max((max(r.longest_history_s(), r.lag.for_s) for r in rules), default=0.0)
        restarts = {cluster: [p.recorded_at for p in timeline[1:]] for cluster, timeline in params.items()}
        diffs = differences(matches, ranges, warmup, restarts)
    return Comparison(
        candidate.name, candidate.recorded, matches, compare(matches), totals(candidate.name, matches), diffs
    )


def ddl(fields: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in fields)


# The comparison's Parquet (`_comparison/`, `_incidents/`) carries this in each row. 2: merged and split (counts,
# and incident outcomes); 1 (no schema_version column): before them.
COMPARISON_SCHEMA_VERSION = 2
COMPARISON_FIELDS = [
    ("schema_version", "smallint"), ("config", "string"), ("rule", "string"), ("severity", "string"),
    *[(name, "double" if name.endswith("_s") else "long") for name in RuleComparison._fields[2:]],
]  # fmt: skip
INCIDENT_FIELDS = [
    ("schema_version", "smallint"), ("config", "string"), ("outcome", "string"), ("cluster", "string"), ("group", "string"), ("topic", "string"),
    ("rule", "string"), ("recorded_severity", "string"), ("replayed_severity", "string"),
    ("recorded_fired_at", "double"), ("replayed_fired_at", "double"), ("shift_s", "double"),
    ("recorded_resolved_at", "double"), ("replayed_resolved_at", "double"), ("reason", "string"),
]  # fmt: skip


def _write_comparison(spark: Any, output: str, comparisons: Sequence[Comparison]) -> None:
    """`_comparison/` (per config, rule and severity) and `_incidents/` (per incident and its counterpart) under
    the output: readers of the replay's `config=` partitions (Spark, pyarrow) skip names starting with `_`."""
    version = COMPARISON_SCHEMA_VERSION
    rules = [(version, c.config, *r) for c in comparisons for r in c.rules]
    incidents = []
    for c in comparisons:
        reasons = {id(d.match): d.reason for d in c.differences}
        for m in c.matches:
            one = m.recorded or m.replayed
            assert one is not None
            a, b = m.recorded, m.replayed
            incidents.append(
                (
                    version, c.config, m.outcome.value, one.cluster, one.group, one.topic, one.rule,
                    a.severity if a else None, b.severity if b else None,
                    a.fired_at if a else None, b.fired_at if b else None, m.shift_s,
                    a.resolved_at if a else None, b.resolved_at if b else None, reasons.get(id(m)),
                )
            )  # fmt: skip
    for name, fields, rows in (("_comparison", COMPARISON_FIELDS, rules), ("_incidents", INCIDENT_FIELDS, incidents)):
        frame = spark.createDataFrame(rows, schema=ddl(fields))
        frame.coalesce(1).write.mode("overwrite").parquet(f"{output.rstrip('/')}/{name}")


def _ms(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def comparison_text(result: BacktestResult) -> str:
    """Each candidate beside what the daemon raised, per rule and severity; `recorded`: equal, or where the
    replay differs and why when known; several candidates: ranked."""
    lines = ["", "== beside what the daemon raised (incidents per rule and the highest severity reached; a page is "
             "an incident that reached critical) =="]  # fmt: skip
    lines += [f"\n{line}" for line in result.overlays]
    if result.open_note:
        lines.append(f"\n{result.open_note}")
    if result.before_range:
        lines.append(
            f"\n{len(result.before_range)} alert(s) the daemon raised before the range's first poll are not compared"
        )
    for c in result.comparisons:
        t = c.totals
        lines.append(
            f"\n{c.config}: {t.alerts_replayed} alerts, {t.pages_replayed} pages; the daemon raised "
            f"{t.alerts_recorded} alerts, {t.pages_recorded} pages"
        )
        lines += table_lines(c.rules)
        if c.recorded and c.differences:
            lines.append(f"  differs in {len(c.differences)} incident(s):")
            lines += difference_lines(c.differences, _ms)
        elif c.recorded:
            lines.append("  equal: the same incidents, severities, fire and resolve times")
        elif not any(r.differs() for r in c.rules):
            lines.append("  no difference: the same incidents, severities and fire times")
    if len(result.comparisons) > 1:
        lines.append("\nranked by pages (then pages lost, then alerts); the daemon's in brackets")
        lines += ranking_lines([c.totals for c in result.comparisons])
    return "\n".join(lines)


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
    table("notifications opening an alert group, per day", counts(days, "day"))
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
        help="a candidate config: rules: and/or alerts:, an overlay on the recorded config; repeat to compare; "
        "'recorded' (default) is exactly what the daemon ran",
    )
    parser.add_argument("--since", type=time_arg, help="ISO time or date, UTC unless it says (default: the start)")
    parser.add_argument("--until", type=time_arg, help="ISO time or date, exclusive (default: the end)")
    parser.add_argument("--output", default="backtest-out", help="Parquet output directory (replaced)")
    parser.add_argument("--master", default=None, help="Spark master (default: local[2]; spark-submit's own)")


def _cmd_backtest(args: argparse.Namespace) -> int:
    from lagwatch.pipeline.jobs import default_master

    default_master(args.master)  # a master Spark would not take: said before anything starts
    spark = None
    if os.environ.get("PYSPARK_GATEWAY_PORT") or args.master is not None:
        from lagwatch.pipeline.session import spark_session

        master = default_master(args.master)  # under spark-submit: its master, its settings over lagwatch's
        _say(f"starting Spark ({master or 'from spark-submit'})")
        s3 = is_s3(args.lake) or is_s3(args.output)
        check_lake(args.lake, "backtest", BacktestError)  # no lake there: one line, before Spark starts
        delta = lake_format(args.lake) == "delta"
        spark = spark_session(master=master, app="lagwatch-backtest", kafka=False, s3=s3, delta=delta)
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
