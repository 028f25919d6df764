"""What-if at scale: `backtest` of four candidates (and `recorded`, the baseline) beside what the daemon raised, then
`report` with that backtest as a section, on a generated week of one cluster (default 1,000 groups x 10 partitions = 10,000 group-partitions).

    python bench/whatif_bench.py                           # a week at a 5-minute poll, generated once and cached
    python bench/whatif_bench.py --replay-days 0.5          # the backtest over the week's first 12 hours only
    python bench/whatif_bench.py --days 1 --interval 60 --runs 1

Unlike backtest_bench.py's lake (snapshots only), this one holds what the daemon raised: every poll of
backtest_bench's traffic model goes through the daemon's own pipeline step (`ClusterPipeline`, the recorded rules
below: routing labels per team, the defaults otherwise) and the lake writer's own `record` (snapshot rows and alert
transitions), as `lagwatch run` writes them. So the backtest's comparison and the report's alerting sections have
the daemon's alerts to work on.

Spark's start is measured apart from the work (one local[2] session for every run); each job's figure is the median
of --runs. The generated lake is cached under --lake, keyed on the parameters, and reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ is the script's own directory, first on sys.path: the generator and the lake it makes are shared.
import backtest_bench as bb
from backtest_bench import lake_of, say

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GENERATOR_VERSION = 1
TEAMS = ("payments", "search", "ingest", "ledger")
# The daemon's configuration: the defaults, and a team per quarter of the groups (a routing label per override).
RECORDED_RULES: dict[str, Any] = {
    "overrides": [
        {"match": {"group": f"svc-\\d*[{i * 2}{i * 2 + 1}]"}, "labels": {"team": t}} for i, t in enumerate(TEAMS)
    ]
}
CANDIDATES = {
    # The four an SRE would try first on a noisy week.
    "lag2x": "rules:\n  lag: {warning: {seconds: 600}, critical: {seconds: 3600}}\n",
    "strict": "rules:\n  lag: {warning: {seconds: 60}, critical: {seconds: 600}, for_s: 60}\n"
    "  stalled: {window_s: 120}\n  stopped: {window_s: 60}\n",
    "slow_for": "rules:\n  lag: {for_s: 900}\n",
    "no_stalled": "rules:\n  stalled: {enabled: false}\n",
}


def bb_start() -> float:
    return float(bb.START)


def lake_key(args: argparse.Namespace) -> str:
    params = {k: getattr(args, k) for k in ("groups", "partitions", "days", "interval", "seed")}
    params |= {"generator": GENERATOR_VERSION, "rules": RECORDED_RULES}
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return f"whatif-{args.groups}x{args.partitions}-{args.days:g}d-{args.interval:g}s-{digest}"


def generate(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The week through the daemon's step and lake writer, into `path` (via a temporary directory)."""
    from lagwatch.alerts import AlertBook, AlertsConfig
    from lagwatch.lake import LakeConfig
    from lagwatch.lake.writer import LakeWriter
    from lagwatch.rules import RuleResolver, RulesConfig
    from lagwatch.step import ClusterPipeline

    tmp = path.with_name(f".tmp-{path.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    now = [bb.START - 60]
    writer = LakeWriter(LakeConfig(enabled=True, path=str(tmp), retention_days=0), clock=lambda: now[0])
    rules, alerts = RulesConfig.model_validate(RECORDED_RULES), AlertsConfig()
    book = AlertBook(alerts)
    max_gap = 2 * args.interval + 30.0
    pipeline = ClusterPipeline.build(bb.CLUSTER, RuleResolver(rules), book, max_gap_s=max_gap)
    pipeline.configure(pipeline.resolver, poll_interval_s=args.interval, max_gap_s=max_gap)
    writer.record_config(bb.CLUSTER, rules.model_dump(mode="json"), alerts.model_dump(mode="json"), max_gap, False,
                         args.interval, book)  # fmt: skip
    polls = round(args.days * 86400 / args.interval)
    gen = bb.Generator(bb.Traffic.build(args.groups, args.partitions, args.days, args.interval, args.seed))
    started = time.monotonic()
    transitions = 0
    for i in range(polls):
        now[0] = bb.START + i * args.interval
        snapshot, _ = gen.poll(now[0])
        evaluation = pipeline.step(snapshot)
        transitions += len(writer.record(snapshot, evaluation, book))
        for n in pipeline.due(now[0]):  # delivered at once, as by a dispatcher that succeeds
            book.delivered(n)
        if (i + 1) % 10 == 0 or i + 1 == polls:  # 10 polls a file, as backtest_bench's lake
            writer.flush()
        if (i + 1) % 100 == 0 or i + 1 == polls:
            elapsed = time.monotonic() - started
            say(f"  generated {i + 1:,}/{polls:,} polls ({transitions:,} alert transitions) in {elapsed:.0f} s, "
                f"about {elapsed / (i + 1) * (polls - i - 1):.0f} s left")  # fmt: skip
    manifest = {
        "polls": polls,
        "transitions": transitions,
        "rows": writer.stats.rows_written,
        "generation_s": round(time.monotonic() - started, 1),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default="/tmp/lagwatch-bench-lake", help="where generated lakes are cached")
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10, help="per group (one topic per group)")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--interval", type=float, default=300.0, help="poll interval, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2, help="runs of each job on one SparkSession (median quoted)")
    parser.add_argument("--replay-days", type=float, default=None, help="backtest only the first N days")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--compact", action="store_true", help="compact the lake (timed) before the Spark jobs")
    args = parser.parse_args()

    root = Path(args.lake)
    path, manifest = lake_of(root, lake_key(args))
    if manifest is None:
        say(f"generating {args.days:g} days of {args.groups} x {args.partitions} at {args.interval:g} s into {path}")
        manifest = generate(path, args)
    if args.generate_only:
        return
    # `recorded` too: the baseline an SRE trusts first, the notifications per day the report counts, and the severity
    # of the daemon's alerts still firing at the range's end (the lake records no escalation).
    configs = ["recorded"]
    for name, text in CANDIDATES.items():
        (root / f"{name}.yaml").write_text(text)
        configs.append(str(root / f"{name}.yaml"))

    from lagwatch.pipeline.backtest import backtest
    from lagwatch.pipeline.compact import compact_lake
    from lagwatch.pipeline.lake_read import lake_format
    from lagwatch.pipeline.report import run_report
    from lagwatch.pipeline.session import spark_session

    delta = lake_format(str(path)) == "delta"
    if delta and "LAGWATCH_SPARK_JARS" not in os.environ:  # delta-spark, fetched with Maven once (as the tests do)
        from tests.spark_jars import ensure_spark_jars

        os.environ["LAGWATCH_SPARK_JARS"] = str(ensure_spark_jars())
    compact_line = "not asked (--compact)"
    if args.compact:  # in place, once: the backtest and report then read the compacted lake, as after daily runs
        say("compact (the whole lake) ...")
        started = time.monotonic()
        summary = compact_lake(str(path), "all", 0, say=lambda _: None)
        compact_line = f"{time.monotonic() - started:.1f} s: {summary.line()}"
        say(f"  {compact_line}")
    started = time.monotonic()
    spark = spark_session("local[2]", "lagwatch-whatif-bench", kafka=False, delta=delta)
    session_s = time.monotonic() - started
    backtest_s: list[float] = []
    report_s: list[float] = []
    with tempfile.TemporaryDirectory(dir=root) as out_root:
        for run in range(args.runs):
            out = Path(out_root) / f"bt{run}"
            say(f"backtest run {run + 1}/{args.runs}: {len(configs)} configs ...")
            started = time.monotonic()
            until = bb_start() + args.replay_days * 86400 if args.replay_days else None
            result = backtest(str(path), configs, str(out), until=until, spark=spark)
            backtest_s.append(time.monotonic() - started)
            say(f"  {backtest_s[-1]:.1f} s")
            say(f"report run {run + 1}/{args.runs} (with the backtest as a section) ...")
            started = time.monotonic()
            report = run_report(str(path), str(Path(out_root) / f"report{run}"), spark=spark, backtest=str(out))
            report_s.append(time.monotonic() - started)
            say(f"  {report_s[-1]:.1f} s")
        html_kb = Path(report.html_path).stat().st_size / 1024
        keep = root / "whatif-report.html"
        shutil.copy(report.html_path, keep)
    spark.stop()
    files = sum(1 for _ in (path / "snapshots").rglob("*.parquet"))
    rows = manifest.get("rows")
    replayed = f"the first {args.replay_days:g} days" if args.replay_days else "the whole range"
    ranking = sorted(result.comparisons, key=lambda c: (c.totals.pages_replayed, c.totals.alerts_replayed))
    print(f"\nlake: {manifest['polls']:,} polls of {args.groups:,} x {args.partitions} group-partitions, "
          f"{manifest['transitions']:,} alert transitions recorded, {files:,} snapshot files; "
          f"{'Delta' if delta else 'Parquet'}; generated in {manifest['generation_s']:,.0f} s"
          + (f"; {rows:,} rows" if rows else ""))  # fmt: skip
    print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"compact: {compact_line}")
    print(f"SparkSession start (apart): {session_s:.1f} s")
    print(f"backtest of {len(configs)} configs (recorded + {len(CANDIDATES)} candidates) over {replayed}: median {statistics.median(backtest_s):.1f} s "
          f"({', '.join(f'{s:.1f}' for s in backtest_s)})")  # fmt: skip
    print(f"report with its alerting sections and the backtest: median {statistics.median(report_s):.1f} s "
          f"({', '.join(f'{s:.1f}' for s in report_s)}); report.html {html_kb:,.0f} KB, kept at {keep}")  # fmt: skip
    for c in ranking:
        t = c.totals
        print(f"  {c.config}: {t.alerts_replayed} alerts ({t.alerts_recorded} recorded), {t.pages_replayed} pages "
              f"({t.pages_recorded}), merged {t.merged}, split {t.split}")  # fmt: skip
    print(f"peak RSS of the driver: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
