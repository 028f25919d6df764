"""The offsets-topic Spark job at scale: a fresh local Kafka, offsets committed for GROUPS x PARTITIONS (ROUNDS times,
so `__consumer_offsets` holds GROUPS x PARTITIONS x ROUNDS commit records), then `lagwatch pipeline offsets-topic`'s
job on local[2], run --runs times on one SparkSession. Prints records/s of the read+decode phase and the whole job.

    python bench/pipeline_bench.py --size 2000x10 --rounds 3 --runs 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def commit(admin: Any, group: str, offsets: dict[Any, Any]) -> None:
    """A fresh broker answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists: retry a while."""
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.alter_group_offsets(group, offsets)
            return
        except Exception as e:
            if "CoordinatorNotAvailable" not in type(e).__name__ or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="2000x10", help="GROUPSxPARTITIONS")
    parser.add_argument("--rounds", type=int, default=3, help="commits of every group-partition")
    parser.add_argument("--runs", type=int, default=2, help="job runs on one SparkSession (the first warms it)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    groups, partitions = (int(x) for x in args.size.split("x"))

    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition

    from lagwatch.config import ClusterConfig
    from lagwatch.devbroker import LocalBroker
    from lagwatch.pipeline.offsets_topic import backfill
    from lagwatch.pipeline.session import spark_session

    with LocalBroker(settings={"offsets.topic.num.partitions": "8"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=60000)
        topics = [f"t{i:04d}" for i in range((groups + 19) // 20)]
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        say(f"committing offsets for {groups:,} groups x {partitions} partitions, {args.rounds} round(s) ...")
        t0 = time.monotonic()
        for r in range(args.rounds):
            for g in range(groups):
                offsets = {
                    KafkaTopicPartition(topics[g // 20], p): OffsetAndMetadata(r, "", -1) for p in range(partitions)
                }
                commit(admin, f"g{g:07d}", offsets)
            say(f"  round {r + 1}: {time.monotonic() - t0:.0f} s")
        admin.close()

        spark_started = time.monotonic()
        spark = spark_session(args.master, "lagwatch-pipeline-bench")
        say(f"SparkSession in {time.monotonic() - spark_started:.1f} s")
        cluster = ClusterConfig(bootstrap_servers=[broker.bootstrap])
        try:
            for run in range(1, args.runs + 1):
                with tempfile.TemporaryDirectory(prefix="lagwatch-pipeline-bench-") as out:
                    s = backfill(spark, "bench", cluster, str(Path(out) / "out"))
                print(
                    f"run {run}: {s.records:,} records ({s.kinds}), undecodable {s.undecodable}; "
                    f"read+decode {s.read_seconds:.1f} s = {s.records_per_second:,.0f} records/s; "
                    f"whole job {s.seconds:.1f} s = {s.records / s.seconds:,.0f} records/s; "
                    f"{s.groups:,} groups, {s.partitions:,} group-partitions"
                )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
