"""The lake at scale: rows, file size and time per poll at G groups x P partitions (100k group-partitions).

    .venv/bin/python bench/lake_bench.py --groups 10000 --partitions 10 --polls 5

Synthetic polls (offsets advance a little each poll) go through the daemon's own pipeline step; the bench times
what the lake adds: `record` (rows from the snapshot, on the poll thread) and `flush` (one Parquet file per poll,
on the writer thread), and reports the file sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lagwatch.lake import LakeConfig
from lagwatch.lake.writer import LakeWriter
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
from tests.synthetic import Pipeline


def poll(t: float, groups: int, partitions: int, i: int) -> ClusterSnapshot:
    gs, offsets = [], {}
    for g in range(groups):
        topic = f"topic-{g // 20}"
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        for tp in tps:
            offsets[tp] = PartitionOffsets(0, 1_000_000 + 100 * i + tp.partition)
        gs.append(
            GroupSnapshot(
                f"group-{g}",
                "Stable",
                "consumer",
                GroupKind.CLASSIC,
                1,
                members=(Member(f"m-{g}", f"client-{g}", "/10.0.0.1", tuple(tps), (topic,)),),
                committed={tp: CommittedOffset(1_000_000 + 90 * i - (g % 7) * 10) for tp in tps},
            )
        )
    return ClusterSnapshot("bench", t, 0.5, tuple(gs), offsets, (BrokerSettings(1, 10080, 600000),))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lake = LakeWriter(LakeConfig(enabled=True, path=str(Path(tmp) / "lake")))
        pipeline = Pipeline()
        record_s, flush_s, step_s = [], [], []
        t0 = time.time()
        for i in range(args.polls):
            snap = poll(t0 + 30 * i, args.groups, args.partitions, i)
            started = time.perf_counter()
            evaluation = pipeline.pipeline.step(snap)
            step_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            lake.record(snap, evaluation, pipeline.book)
            record_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert lake.flush()
            flush_s.append(time.perf_counter() - started)
            print(
                f"poll {i + 1}/{args.polls}: step {step_s[-1]:.2f} s, record {record_s[-1]:.2f} s, "
                f"flush {flush_s[-1]:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        files = sorted((Path(tmp) / "lake" / "snapshots").rglob("part-*.parquet"))
        sizes = [f.stat().st_size for f in files]
        rows = lake.stats.rows_written // args.polls
        gp = args.groups * args.partitions
        print(f"{args.groups} groups x {args.partitions} partitions = {gp} group-partitions, {args.polls} polls")
        print(f"rows per poll: {rows} ({gp} partition rows + group and poll rows)")
        print(
            f"file per poll: median {statistics.median(sizes) / 1e6:.2f} MB ({statistics.median(sizes) / gp:.1f} B per group-partition, zstd)"
        )
        print(f"pipeline step (for scale): median {statistics.median(step_s):.2f} s")
        print(f"record (poll thread): median {statistics.median(record_s):.2f} s")
        print(f"flush (writer thread, one file): median {statistics.median(flush_s):.2f} s")


if __name__ == "__main__":
    main()
