"""The backtest at scale: a synthetic lag history lake of G groups x P partitions x DAYS at a 30 s poll (1,000
group-partitions x 7 days = 20,160 polls, about 22 M rows), then `lagwatch pipeline backtest` on local[2] with two
candidates side by side (`recorded` and a stricter config), and `lagwatch pipeline compact` once.

    python bench/backtest_bench.py --lake /tmp/lagwatch-bench-lake --days 7 --runs 2
    python bench/backtest_bench.py --lake /tmp/lagwatch-bench-lake --days 1 --profile-polls 300

The lake is the daemon's own files: every poll goes through `codec.snapshot_rows` and the writer's own Parquet code
(`LakeWriter._write`: the same Arrow schema, zstd, file layout), `--polls-per-file` polls per file (10: what the
daemon's default `roll_seconds` of 300 makes at a 30 s poll), plus the `config` row `record_config` writes (the daemon's
default rules and alerts), so the `recorded` candidate works. Traffic: diurnal production; most groups keep up; some
have little headroom and fall behind at the daily peak; every day a few incidents (a stall for tens of minutes, a
consumer stopping for an hour, a slow consumer for hours, one stuck partition) and, once, the cluster unreachable for
five minutes. The generated lake is cached under --lake, keyed on the parameters, and reused.

Memory of Spark's Python workers and of the machine is sampled during every Spark run; a run is stopped (its Python
workers killed, by pid) when the machine's available memory falls below --min-available-gb.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import math
import os
import pstats
import random
import shutil
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lagwatch.model import (
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    Member,
    PartitionOffsets,
    TopicPartition,
)

CLUSTER = "bench"
START = 1_793_491_200.0  # 2026-11-01T00:00:00Z
GENERATOR_VERSION = 1  # bump when the traffic model changes: the cache key changes with it
STRICT_YAML = """\
# Stricter than the defaults: lag alerts at 1 and 10 minutes behind, shorter windows.
rules:
  lag: {warning: {seconds: 60}, critical: {seconds: 600}, for_s: 60}
  stalled: {window_s: 120}
  stopped: {window_s: 60}
  falling_behind: {window_s: 300}
alerts: {group_wait_s: 30, group_interval_s: 300}
"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the synthetic traffic ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Incident:
    kind: str  # stall | stop | slow | stuck_partition | unreachable
    group: int  # -1: the whole cluster
    start: float
    end: float


@dataclass
class Traffic:
    """Per partition: the log end, the backlog (lag), the base rate; per group: capacity and incidents."""

    groups: int
    partitions: int
    interval_s: float
    seed: int
    rate: list[float] = field(default_factory=list)  # records/s per partition at the daily mean
    phase: list[float] = field(default_factory=list)  # per group: when its day peaks (fraction of a day)
    capacity: list[float] = field(default_factory=list)  # per group: records/s per partition it can consume
    log_end: list[int] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)

    @classmethod
    def build(cls, groups: int, partitions: int, days: float, interval_s: float, seed: int) -> Traffic:
        rng = random.Random(seed)
        t = cls(groups, partitions, interval_s, seed)
        for g in range(groups):
            base = math.exp(rng.uniform(math.log(2), math.log(300)))
            t.phase.append(rng.uniform(0.45, 0.65))  # peaks in the (UTC) afternoon
            # Most groups have 2-4x headroom over the peak (mean x 1.7); one in ten has little and falls behind at
            # the peak, catching up at night.
            headroom = rng.uniform(0.85, 1.05) if g % 10 == 7 else rng.uniform(2.0, 4.0)
            t.capacity.append(base * 1.7 * headroom)
            for _ in range(partitions):
                t.rate.append(base * rng.uniform(0.8, 1.2))
                t.log_end.append(rng.randrange(10_000, 50_000_000))
                t.backlog.append(0)
        day = 86400.0
        kinds = ["stall", "stop", "slow", "stuck_partition"]
        for d in range(math.ceil(days)):
            for kind in kinds:
                g = rng.randrange(groups)
                start = d * day + rng.uniform(0.05, 0.9) * day
                length = {
                    "stall": rng.uniform(10, 45) * 60,
                    "stop": rng.uniform(55, 75) * 60,
                    "slow": rng.uniform(2, 4) * 3600,
                    "stuck_partition": rng.uniform(20, 40) * 60,
                }[kind]
                t.incidents.append(Incident(kind, g, START + start, START + start + length))
        t.incidents.append(Incident("unreachable", -1, START + 2.4 * day, START + 2.4 * day + 300))
        return t

    def active(self, now: float) -> dict[int, str]:
        return {i.group: i.kind for i in self.incidents if i.start <= now < i.end}

    def advance(self, now: float, rng: random.Random) -> dict[int, str]:
        """One poll interval of production and consumption; the incidents in force."""
        incidents = self.active(now)
        for g in range(self.groups):
            diurnal = 1.0 + 0.7 * math.sin(2 * math.pi * ((now - START) / 86400.0 - self.phase[g] + 0.25))
            kind = incidents.get(g)
            capacity = self.capacity[g] * self.interval_s
            if kind in ("stall", "stop"):
                capacity = 0.0
            elif kind == "slow":
                capacity *= 0.3
            for p in range(self.partitions):
                i = g * self.partitions + p
                produced = max(0, round(self.rate[i] * diurnal * self.interval_s * rng.uniform(0.85, 1.15)))
                self.log_end[i] += produced
                room = 0.0 if kind == "stuck_partition" and p == 0 else capacity
                consumed = min(self.backlog[i] + produced, int(room * rng.uniform(0.9, 1.1)))
                self.backlog[i] += produced - consumed
        return incidents


class Generator:
    """Snapshots of one synthetic cluster, poll by poll, as the daemon's poller would have returned them."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic
        self.rng = random.Random(traffic.seed + 1)
        self.topics = [f"events-{g:03d}" for g in range(traffic.groups)]
        self.tps = [
            [TopicPartition(self.topics[g], p) for p in range(traffic.partitions)] for g in range(traffic.groups)
        ]
        self.members: list[tuple[Member, ...]] = []
        for g in range(traffic.groups):
            n = 1 + g % 3
            tps = self.tps[g]
            self.members.append(
                tuple(
                    Member(
                        f"consumer-{g}-{m}-6f1c2a",
                        f"svc-{g:03d}",
                        f"/10.1.{g % 250}.{m + 10}",
                        tuple(tps[m::n]),
                        (self.topics[g],),
                    )
                    for m in range(n)
                )
            )
        self.brokers = tuple(BrokerSettings(b, 10080, 600000) for b in (1, 2, 3))
        self.requests = {"ListGroups": 1, "DescribeGroups": 1, "OffsetFetch": 1, "Metadata": 1, "ListOffsets": 2}

    def poll(self, now: float) -> tuple[ClusterSnapshot, dict[str, dict[TopicPartition, Any]]]:
        tr = self.traffic
        incidents = tr.advance(now, self.rng)
        duration = round(self.rng.uniform(0.08, 0.3), 3)
        if incidents.get(-1) == "unreachable":
            return ClusterSnapshot(CLUSTER, now, 5.0, error="bootstrap: timed out", error_kind="unreachable"), {}
        groups = []
        partitions: dict[TopicPartition, PartitionOffsets] = {}
        figures: dict[str, dict[TopicPartition, Any]] = {}
        for g in range(tr.groups):
            stopped = incidents.get(g) == "stop"
            committed = {}
            group_figures = {}
            for p, tp in enumerate(self.tps[g]):
                i = g * tr.partitions + p
                end = tr.log_end[i]
                lag = tr.backlog[i]
                partitions[tp] = PartitionOffsets(0, end)
                committed[tp] = CommittedOffset(end - lag)
                # What the daemon's evaluation would roughly have said (lag over the mean rate; estimated).
                group_figures[tp] = (lag, "ok", round(lag / tr.rate[i], 1), True, False)
            figures[f"svc-{g:03d}"] = group_figures
            groups.append(
                GroupSnapshot(
                    f"svc-{g:03d}",
                    "Empty" if stopped else "Stable",
                    "consumer",
                    GroupKind.CLASSIC,
                    1 + g % 3,
                    members=() if stopped else self.members[g],
                    committed=committed,
                )
            )
        snapshot = ClusterSnapshot(
            CLUSTER, now, duration, tuple(groups), partitions, self.brokers, requests=self.requests
        )
        return snapshot, figures


# -- the lake on disk --------------------------------------------------------------------------------------------------


def lake_of(root: Path, key: str) -> tuple[Path, dict[str, Any] | None]:
    """Where the generated lake named `key` goes under `root`, and its manifest if it was generated before (the
    benches that share this generator reuse a lake rather than make it again: minutes at a week)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / key
    if not (path / "manifest.json").exists():
        return path, None
    say(f"reusing the lake at {path}")
    manifest: dict[str, Any] = json.loads((path / "manifest.json").read_text())
    return path, manifest


def lake_key(args: argparse.Namespace) -> str:
    params = {
        "groups": args.groups,
        "partitions": args.partitions,
        "days": args.days,
        "interval_s": args.interval,
        "seed": args.seed,
        "polls_per_file": args.polls_per_file,
        "generator": GENERATOR_VERSION,
    }
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return f"{args.groups}x{args.partitions}-{args.days:g}d-{args.interval:g}s-{digest}"


def generate(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Writes the lake under `path` (via a temporary directory, renamed when complete); returns its manifest."""
    from lagwatch.alerts import AlertBook, AlertsConfig
    from lagwatch.lake import LakeConfig, codec
    from lagwatch.lake.writer import LakeWriter, _Batch
    from lagwatch.rules import RulesConfig

    tmp = path.with_name(f".tmp-{path.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    # The Parquet layout (the benches' cached lakes are Parquet; a Delta lake's appends go through delta-rs).
    writer = LakeWriter(LakeConfig(enabled=True, path=str(tmp), format="parquet"), clock=lambda: START - 60)
    alerts = AlertsConfig()
    # The daemon's own start: the configuration in force (its defaults), a minute before the first poll.
    writer.record_config(
        CLUSTER,
        RulesConfig().model_dump(mode="json"),
        alerts.model_dump(mode="json"),
        2 * args.interval + 30.0,
        False,
        args.interval,
        AlertBook(alerts),
    )
    assert writer.flush()
    polls = round(args.days * 86400 / args.interval)
    traffic = Traffic.build(args.groups, args.partitions, args.days, args.interval, args.seed)
    gen = Generator(traffic)
    started = time.monotonic()
    pending: list[Any] = []
    pending_date = ""
    rows = partition_rows = 0

    def roll() -> None:
        if pending:
            # The writer's own file code (private, but it is what makes the files byte-for-byte the daemon's).
            writer._write("snapshots", CLUSTER, pending_date, writer._new_name(), pending)
            pending.clear()

    for i in range(polls):
        now = START + i * args.interval
        snapshot, figures = gen.poll(now)
        columns = codec.snapshot_rows(snapshot, figures)
        n = len(columns["ordinal"])
        rows += n
        partition_rows += sum(1 for k in columns["row_kind"] if k == "partition")
        date = codec.date_of(now)
        if date != pending_date or len(pending) >= args.polls_per_file:
            roll()
            pending_date = date
        pending.append(_Batch("snapshots", CLUSTER, date, columns, n, 0.0))
        if (i + 1) % 500 == 0 or i + 1 == polls:
            elapsed = time.monotonic() - started
            eta = elapsed / (i + 1) * (polls - i - 1)
            say(f"  generated {i + 1:,}/{polls:,} polls ({rows:,} rows) in {elapsed:.0f} s, about {eta:.0f} s left")
    roll()
    seconds = time.monotonic() - started
    manifest = {
        "polls": polls,
        "rows": rows,
        "partition_rows": partition_rows,
        "files": writer.stats.files_written,
        "generation_s": round(seconds, 1),
        "incidents": [[x.kind, x.group, x.start, x.end] for x in traffic.incidents],
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)
    return manifest


def lake_sizes(path: Path, dataset: str) -> tuple[int, int]:
    files = [f for f in (path / dataset).rglob("*.parquet") if not f.name.startswith(".")]
    return sum(f.stat().st_size for f in files), len(files)


# -- memory, sampled while Spark runs -----------------------------------------------------------------------------------


def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        out[name] = int(value.split()[0]) * 1024
    return out


def _processes() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command line, RSS bytes), for every process readable now."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        out[int(entry.name)] = (int(fields["PPid"]), cmdline, rss)
    return out


class MemoryWatch:
    """Samples, twice a second, the RSS of this process's descendants (the JVM, Spark's Python workers) and the
    machine's available memory. Below `min_available` bytes it kills the biggest Python worker (its own child, by
    pid): the Spark task fails, and the run is reported as stopped, rather than the box swapping or the OOM killer
    choosing for us."""

    def __init__(self, min_available: int) -> None:
        self.min_available = min_available
        self.peak_worker = 0  # the biggest single Python worker
        self.peak_workers = 0  # all Python workers together
        self.peak_jvm = 0
        self.min_machine_available = 1 << 62
        self.killed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _mine(self) -> dict[int, tuple[int, str, int]]:
        procs = _processes()
        me = os.getpid()
        mine = {}
        for pid, (ppid, cmd, rss) in procs.items():
            p, seen = ppid, 0
            while p > 1 and p != me and seen < 20:
                p, seen = procs.get(p, (0, "", 0))[0], seen + 1
            if p == me:
                mine[pid] = (ppid, cmd, rss)
        return mine

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            mine = self._mine()
            workers = {pid: rss for pid, (_, cmd, rss) in mine.items() if "pyspark" in cmd and "java" not in cmd}
            jvm = sum(rss for _, cmd, rss in mine.values() if "java" in cmd)
            self.peak_worker = max(self.peak_worker, *workers.values(), 0)
            self.peak_workers = max(self.peak_workers, sum(workers.values()))
            self.peak_jvm = max(self.peak_jvm, jvm)
            available = _meminfo()["MemAvailable"]
            self.min_machine_available = min(self.min_machine_available, available)
            if available < self.min_available and workers:
                pid = max(workers, key=lambda p: workers[p])
                say(f"  memory: {available / 2**30:.1f} GB available: killing Python worker {pid}")
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                except OSError:
                    pass

    def line(self) -> str:
        total = _meminfo()["MemTotal"]
        return (
            f"peak Python worker {self.peak_worker / 2**20:,.0f} MB (all workers {self.peak_workers / 2**20:,.0f} MB), "
            f"JVM {self.peak_jvm / 2**20:,.0f} MB, machine at most "
            f"{(total - self.min_machine_available) / 2**30:.1f} of {total / 2**30:.1f} GB used"
        )


# -- the replay, profiled in one process ------------------------------------------------------------------------------


def profile_replay(path: Path, start: float, polls: int, interval: float, strict: Path) -> str:
    """The executor's work on a slice, in this process: Arrow rows -> dicts -> snapshots (the codec) -> each
    candidate's step and transitions. Phases timed without the profiler first, then cProfile's top functions."""
    import pyarrow.dataset as ds

    from lagwatch.lake.codec import snapshots_from_rows
    from lagwatch.pipeline import backtest

    end = start + polls * interval
    table = (
        ds.dataset(path / "snapshots", format="parquet", partitioning="hive")
        .to_table(filter=(ds.field("taken_at") >= start) & (ds.field("taken_at") < end))
        .drop_columns(["poll_time", "schema_version", "date"])
        .sort_by([("taken_at", "ascending"), ("ordinal", "ascending")])
    )
    params = _recorded_params(path)
    candidates = [backtest.load_candidate("recorded"), backtest.load_candidate(str(strict))]
    say(f"  profiling {polls} polls ({table.num_rows:,} rows) from {time.strftime('%H:%M', time.gmtime(start))}")

    def run(timed: dict[str, float] | None) -> None:
        replayers = [r for c in candidates if (r := backtest.Replayer.of(CLUSTER, c, params)) is not None]
        clock = time.perf_counter
        for batch in table.to_batches(max_chunksize=10_000):
            t0 = clock()
            names = batch.schema.names
            columns = batch.to_pydict()
            rows = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
            t1 = clock()
            polls_rows: dict[float, list[dict[str, Any]]] = {}
            for r in rows:
                polls_rows.setdefault(r["taken_at"], []).append(r)
            snapshots = [s for rs in polls_rows.values() for s in snapshots_from_rows(CLUSTER, rs)]
            t2 = clock()
            for s in snapshots:
                for r in replayers:
                    a = clock()
                    evaluation = r.pipeline.step(s)
                    b = clock()
                    transitions = r.tracker.observe(r.book, evaluation.now)
                    r.pipeline.due(s.taken_at)
                    c = clock()
                    if timed is not None:
                        timed["ClusterPipeline.step"] += b - a
                        timed["transitions + notifications"] += c - b
                    del transitions
            if timed is not None:
                timed["Arrow batch -> row dicts"] += t1 - t0
                timed["rows -> snapshots (codec)"] += t2 - t1

    timed: dict[str, float] = dict.fromkeys(
        [
            "Arrow batch -> row dicts",
            "rows -> snapshots (codec)",
            "ClusterPipeline.step",
            "transitions + notifications",
        ],
        0.0,
    )
    run(timed)
    total = sum(timed.values())
    lines = [f"replay of {polls} polls x {len(candidates)} candidates, {table.num_rows:,} rows, in one process:"]
    for name, seconds in timed.items():
        lines.append(
            f"  {name:32s} {seconds:7.2f} s  {100 * seconds / total:5.1f} %  {1000 * seconds / polls:6.2f} ms/poll"
        )
    lines.append(f"  {'total':32s} {total:7.2f} s  -> {table.num_rows / total:,.0f} rows/s")
    profiler = cProfile.Profile()
    profiler.runcall(run, None)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(28)
    lines.append("cProfile (cumulative; the profiler's overhead inflates small calls):")
    lines += [line for line in text.getvalue().splitlines() if line.strip()][4:]
    return "\n".join(lines)


def _recorded_params(path: Path) -> Any:
    import pyarrow.dataset as ds

    from lagwatch.pipeline.backtest import ClusterParams

    r = ds.dataset(path / "config", format="parquet", partitioning="hive").to_table().to_pylist()[-1]
    return ClusterParams(
        float(r["max_gap_s"]), bool(r["read_committed"]), json.loads(r["rules_json"]), json.loads(r["alerts_json"])
    )


# -- the bench ------------------------------------------------------------------------------------------------------------


def compact_once(path: Path) -> tuple[float, str]:
    """`lagwatch pipeline compact` on a copy of the lake (hard links: compact writes new files and deletes its
    inputs, never changes one in place), so the cached lake stays as the daemon wrote it."""
    from lagwatch.pipeline.compact import compact_lake

    copy = path.with_name(f".compact-{path.name}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy, copy_function=os.link)
    try:
        summary = compact_lake(str(copy), older_than_hours=0, say=lambda m: None)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return summary.seconds, summary.line()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default="/tmp/lagwatch-bench-lake", help="where generated lakes are cached")
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10, help="per group (one topic per group)")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--interval", type=float, default=30.0, help="poll interval, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--polls-per-file", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2, help="backtest runs on one SparkSession (median quoted)")
    parser.add_argument("--replay-days", type=float, default=None, help="backtest only the first N days")
    parser.add_argument("--profile-polls", type=int, default=240, help="0: no profile")
    parser.add_argument("--profile-from-hours", type=float, default=5.5, help="the slice's start, hours in")
    parser.add_argument("--no-compact", action="store_true")
    parser.add_argument("--min-available-gb", type=float, default=4.0, help="stop a run below this (see above)")
    args = parser.parse_args()

    root = Path(args.lake)
    path, manifest = lake_of(root, lake_key(args))
    if manifest is None:
        polls = round(args.days * 86400 / args.interval)
        say(f"generating {polls:,} polls of {args.groups} x {args.partitions} into {path} ...")
        manifest = generate(path, args)
    strict = root / "strict.yaml"
    strict.write_text(STRICT_YAML)
    snap_bytes, snap_files = lake_sizes(path, "snapshots")
    rows, partition_rows = manifest["rows"], manifest["partition_rows"]
    figures: list[tuple[str, str]] = [
        (
            "lake",
            f"{manifest['polls']:,} polls, {rows:,} rows ({partition_rows:,} partition rows), {snap_files:,} files",
        ),
        ("snapshots on disk", f"{snap_bytes / 1e6:,.1f} MB"),
        ("bytes per million rows (all kinds)", f"{snap_bytes / (rows / 1e6) / 1e6:.2f} MB"),
        ("bytes per million partition rows", f"{snap_bytes / (partition_rows / 1e6) / 1e6:.2f} MB"),
        (
            "generation (one process)",
            f"{manifest['generation_s']:,.0f} s ({rows / manifest['generation_s']:,.0f} rows/s)",
        ),
    ]

    if args.profile_polls:
        start = START + args.profile_from_hours * 3600
        print(profile_replay(path, start, args.profile_polls, args.interval, strict))

    if args.runs:
        from lagwatch.pipeline.backtest import run_backtest
        from lagwatch.pipeline.session import spark_session

        until = START + args.replay_days * 86400 if args.replay_days else None
        replayed = rows if until is None else round(rows * min(1.0, args.replay_days / args.days))
        started = time.monotonic()
        spark = spark_session(app="lagwatch-backtest-bench")
        figures.append(("SparkSession start (not in the runs)", f"{time.monotonic() - started:.1f} s"))
        seconds = []
        output = root / "backtest-out"
        for run in range(args.runs):
            say(f"backtest run {run + 1}/{args.runs} ({replayed:,} rows, recorded + strict) ...")
            with MemoryWatch(int(args.min_available_gb * 2**30)) as watch:
                started = time.monotonic()
                pdf = run_backtest(str(path), ["recorded", str(strict)], str(output), until=until, spark=spark)
                seconds.append(time.monotonic() - started)
            if watch.killed:
                raise SystemExit(f"run {run + 1} stopped: the machine ran short of memory; {watch.line()}")
            alerts = pdf[pdf["kind"] == "alert"].groupby("config").size().to_dict()
            pages = pdf[(pdf["kind"] == "notification") & (pdf["notification_kind"] == "firing")]
            say(
                f"  run {run + 1}: {seconds[-1]:.1f} s; alerts {alerts}; pages {pages.groupby('config').size().to_dict()}"
            )
            figures.append((f"backtest run {run + 1}", f"{seconds[-1]:,.1f} s; {watch.line()}"))
        median = statistics.median(seconds)
        figures.append(
            (
                f"backtest, 2 candidates, median of {args.runs}",
                f"{median:,.1f} s = {replayed / median:,.0f} lake rows/s ({2 * replayed / median:,.0f} row-replays/s)",
            )
        )
        figures.append(("alerts found (recorded / strict)", f"{alerts.get('recorded', 0)} / {alerts.get('strict', 0)}"))
        spark.stop()

    if not args.no_compact:
        say("compact (on a hard-linked copy) ...")
        seconds_compact, line = compact_once(path)
        figures.append(("compact, whole lake", f"{seconds_compact:,.1f} s: {line}"))

    width = max(len(k) for k, _ in figures)
    print(f"\n{'what':{width}s}  figure")
    for k, v in figures:
        print(f"{k:{width}s}  {v}")


if __name__ == "__main__":
    main()
