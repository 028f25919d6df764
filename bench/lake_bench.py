"""The lake at scale: rows, file size and time per poll at G groups x P partitions (100k group-partitions).

    .venv/bin/python bench/lake_bench.py --groups 10000 --partitions 10 --polls 5 [--format delta|parquet] [--s3]

Synthetic polls (offsets advance a little each poll) go through the daemon's own pipeline step; the bench times
what the lake adds: `record` (rows from the snapshot, on the poll thread) and `flush` (one append per poll, on the
writer thread: a Parquet file, or a Delta commit), and reports the file sizes. `--s3` writes to a SeaweedFS started
for the run (tests/s3_server.py; `make test-deps` builds it), as the deployed daemon writes to object storage.
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
    parser.add_argument("--format", choices=["delta", "parquet"], default="delta")
    parser.add_argument("--s3", action="store_true", help="write to a SeaweedFS started for the run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        config: dict[str, object] = {"enabled": True, "path": str(Path(tmp) / "lake"), "format": args.format}
        if args.s3:
            from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, weed_binary

            binary = weed_binary()
            assert binary, "SeaweedFS not built: deploy/tools/install-seaweedfs.sh"
            server = S3Server(binary, Path(tmp) / "seaweedfs").start()
            keys = {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
            config.update(path="s3://lake/bench", s3={"endpoint": server.endpoint, **keys})
        try:
            run(args, LakeWriter(LakeConfig.model_validate(config)), tmp, server)
        finally:
            if server is not None:
                server.remove()


def run(args: argparse.Namespace, lake: LakeWriter, tmp: str, server: object) -> None:
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
    if server is None:
        sizes = [f.stat().st_size for f in sorted((Path(tmp) / "lake" / "snapshots").rglob("part-*.parquet"))]
    else:
        from pyarrow import fs

        listed = server.filesystem().get_file_info(fs.FileSelector("lake/bench/snapshots", recursive=True))  # type: ignore[attr-defined]
        sizes = [f.size for f in listed if f.base_name.startswith("part-") and f.base_name.endswith(".parquet")]
    rows = lake.stats.rows_written // args.polls
    gp = args.groups * args.partitions
    where = "SeaweedFS (S3)" if server is not None else "local disk"
    print(f"{args.groups} groups x {args.partitions} partitions = {gp} group-partitions, {args.polls} polls, "
          f"{args.format} on {where}")  # fmt: skip
    print(f"rows per poll: {rows} ({gp} partition rows + group and poll rows)")
    print(
        f"file per poll: median {statistics.median(sizes) / 1e6:.2f} MB ({statistics.median(sizes) / gp:.1f} B per group-partition, zstd)"
    )
    print(f"pipeline step (for scale): median {statistics.median(step_s):.2f} s")
    print(f"record (poll thread): median {statistics.median(record_s):.2f} s")
    print(f"flush (writer thread, one append): median {statistics.median(flush_s):.2f} s, "
          f"max {max(flush_s):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
