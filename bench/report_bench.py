"""The `report` job on a week of lake: 1,000 group-partitions x 7 days at a 30 s poll (about 20 M rows), the lake
`backtest_bench.py` generates and caches (generated here too if missing, same parameters, same cache).

Measures, on one local[2] SparkSession (its start reported, not counted): the whole `run_report` (Parquet tables and
report.html), median of --runs; and side by side in the same run, the per group and day lag percentiles computed by
pandas in one process from the same files (what a person would write without Spark), as a baseline.

    python bench/report_bench.py                 # the 7-day lake (generated once, about 10 minutes)
    python bench/report_bench.py --days 1 --runs 3
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

# bench/ is the script's own directory, first on sys.path: the generator and the lake it makes are shared.
import backtest_bench as bb
from backtest_bench import lake_of, say


def pandas_baseline(lake: Path) -> tuple[float, int]:
    """Seconds for pandas to read the partition rows' (date, taken_at, group, lag) and compute the same per group
    and day p50/p95/p99/max of lag; and the number of group-days."""
    import pyarrow.dataset as ds

    started = time.perf_counter()
    table = ds.dataset(lake / "snapshots", format="parquet", partitioning="hive").to_table(
        columns=["date", "taken_at", "group", "lag"], filter=ds.field("row_kind") == "partition"
    )
    frame = table.to_pandas()
    polls = frame.groupby(["date", "taken_at", "group"], observed=True)["lag"].sum(min_count=1).reset_index()
    daily = polls.groupby(["date", "group"], observed=True)["lag"].quantile([0.5, 0.95, 0.99]).unstack()
    daily["max"] = polls.groupby(["date", "group"], observed=True)["lag"].max()
    return time.perf_counter() - started, len(daily)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default="/tmp/lagwatch-bench-lake", help="where generated lakes are cached")
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--polls-per-file", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2, help="report runs on one SparkSession (median quoted)")
    parser.add_argument("--no-pandas", action="store_true", help="skip the pandas baseline")
    args = parser.parse_args()

    root = Path(args.lake)
    path, manifest = lake_of(root, bb.lake_key(args))
    if manifest is None:
        say(f"generating the lake into {path} (backtest_bench's generator) ...")
        manifest = bb.generate(path, args)
    rows, partition_rows = manifest["rows"], manifest["partition_rows"]

    from lagwatch.pipeline.report import run_report
    from lagwatch.pipeline.session import spark_session

    t0 = time.perf_counter()
    spark = spark_session("local[2]", "lagwatch-report-bench", kafka=False)
    session_s = time.perf_counter() - t0
    times: list[float] = []
    with tempfile.TemporaryDirectory() as out_root:
        for run in range(args.runs):
            say(f"report run {run + 1}/{args.runs} ...")
            out = Path(out_root) / f"run{run}"
            started = time.perf_counter()
            report = run_report(str(path), str(out), spark=spark)
            times.append(time.perf_counter() - started)
            say(f"  {times[-1]:.1f} s")
        html_kb = Path(report.html_path).stat().st_size / 1024
        tables_mb = sum(f.stat().st_size for f in out.rglob("*.parquet")) / 1e6
    spark.stop()
    baseline = None if args.no_pandas else pandas_baseline(path)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    median = statistics.median(times)
    print(f"\nreport over {manifest['polls']:,} polls, {rows:,} lake rows ({partition_rows:,} partition rows)")
    print(f"  SparkSession start (not counted): {session_s:.1f} s")
    print(f"  whole job: median {median:.1f} s of {len(times)} ({', '.join(f'{t:.1f}' for t in times)} s)")
    print(f"  = {rows / median:,.0f} lake rows/s; {len(report.group_daily):,} group-days, "
          f"{len(report.incidents):,} incidents; report.html {html_kb:,.0f} KB, tables {tables_mb:.2f} MB")  # fmt: skip
    if baseline is not None:
        seconds, group_days = baseline
        print(f"  pandas, one process, percentiles per group and day only: {seconds:.1f} s ({group_days:,} group-days)")
    print(f"  peak RSS of this (driver) process: {rss_mb:,.0f} MB")


if __name__ == "__main__":
    main()
