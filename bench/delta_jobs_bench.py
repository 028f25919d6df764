"""The pipeline's jobs on a Delta lake at 10,000 group-partitions: the daemon's own writer appends HOURS of polls
(one Delta commit per roll of 4 polls, as the default roll_rows makes at this size), then `compact` (delta-rs
OPTIMIZE and VACUUM) and the report on one local[2] SparkSession, its start timed apart.

    .venv/bin/python bench/delta_jobs_bench.py --groups 1000 --partitions 10 --hours 2 --interval 30

A week at this size at 30-s polls (20,160 polls, 222 M rows) is out of reach of this 2-core machine: at the measured backtest
rate (12,800 lake rows/s) its replay alone would take about 5 hours. The report and compaction scale with rows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lake_bench import poll
from lagwatch.lake import LakeConfig
from lagwatch.lake.writer import LakeWriter
from tests.synthetic import Pipeline


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=30.0)
    args = parser.parse_args()
    polls = round(args.hours * 3600 / args.interval)
    with tempfile.TemporaryDirectory() as tmp:
        lake = f"{tmp}/lake"
        t0 = 1_793_491_200.0  # 2026-11-01T00:00:00Z
        writer = LakeWriter(LakeConfig(enabled=True, path=lake, retention_days=0), clock=lambda: t0 - 60)
        pipeline = Pipeline()
        writer.record_config("bench", {}, {}, 90.0, False, args.interval, pipeline.book)
        started = time.perf_counter()
        append_s = 0.0
        for i in range(polls):
            snap = poll(t0 + i * args.interval, args.groups, args.partitions, i)
            writer.record(snap, pipeline.pipeline.step(snap), pipeline.book)
            if (i + 1) % 4 == 0 or i + 1 == polls:
                t = time.perf_counter()
                assert writer.flush()
                append_s += time.perf_counter() - t
        generation = time.perf_counter() - started
        rows = writer.stats.rows_written
        print(f"{args.groups * args.partitions:,} group-partitions, {polls:,} polls, {rows:,} rows, "
              f"{writer.stats.files_written} Delta commits; generated in {generation:.0f} s, "
              f"appends {append_s:.1f} s ({append_s / writer.stats.files_written:.2f} s each)")  # fmt: skip
        from lagwatch.pipeline.compact import compact_lake

        t = time.perf_counter()
        summary = compact_lake(lake, "all", 0, say=lambda _: None)
        print(f"compact (OPTIMIZE + VACUUM): {time.perf_counter() - t:.1f} s: {summary.line()}")
        from lagwatch.pipeline.report import run_report
        from lagwatch.pipeline.session import spark_session

        t = time.perf_counter()
        spark = spark_session("local[2]", "lagwatch-delta-bench", kafka=False, delta=True)
        spark.range(1).count()
        print(f"Spark start (with delta-spark): {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        run_report(lake, f"{tmp}/report", spark=spark, plotted_groups=12)
        report_s = time.perf_counter() - t
        print(f"report: {report_s:.1f} s ({rows / report_s:,.0f} rows/s)")
        from lagwatch.pipeline.backtest import run_backtest

        t = time.perf_counter()
        run_backtest(lake, ["recorded"], f"{tmp}/backtest", None, None, spark)
        backtest_s = time.perf_counter() - t
        print(f"backtest (recorded): {backtest_s:.1f} s ({rows / backtest_s:,.0f} rows/s)")
        spark.stop()


if __name__ == "__main__":
    main()
