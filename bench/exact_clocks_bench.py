"""Exact clocks at scale: the cost of reading `__consumer_offsets` into lagwatch's history.

1. Synthetic (default 1M committed group-partitions): offset-commit records in the exact bytes Kafka 4.1 writes
   (key version 1, value version 4), decoded by the core decoder and folded into ExactClocks. Prints records/s
   and the memory the clocks hold (tracemalloc), median of --repeat runs.
2. --real GROUPSxPARTITIONS: a fresh local Kafka, offsets committed for that many groups, then lagwatch's own
   OffsetsTopicReader from the start of the topic until it is live: start-up time and peak RSS.

    python bench/exact_clocks_bench.py --synthetic 100000x10 --real 2000x10
"""

from __future__ import annotations

import argparse
import resource
import statistics
import struct
import sys
import threading
import time
import tracemalloc
from collections.abc import Sequence

from lagwatch.history import ExactClocks
from lagwatch.offsets_topic import Record, decode_record


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def commit_record(group: str, topic: str, partition: int, offset: int, at_ms: int) -> tuple[bytes, bytes]:
    key = struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)
    # v4 (flexible): offset, leader epoch, metadata as a compact string (length + 1), commit timestamp, no tags.
    value = struct.pack(">hqi", 4, offset, 0) + b"\x01" + struct.pack(">q", at_ms) + b"\x00"
    return key, value


def synthetic(groups: int, partitions: int, repeat: int) -> None:
    say(f"building {groups * partitions:,} offset-commit records ...")
    now_ms = int(time.time() * 1000)
    records = [
        commit_record(f"group-{g:07d}", f"topic-{g // 20:05d}", p, 1000 + p, now_ms)
        for g in range(groups)
        for p in range(partitions)
    ]
    rates = []
    for run in range(repeat):
        clocks = ExactClocks()
        t0 = time.perf_counter()
        for key, value in records:
            clocks.apply(decode_record(key, value))
        elapsed = time.perf_counter() - t0
        rates.append(len(records) / elapsed)
        say(f"  run {run + 1}/{repeat}: {elapsed:.2f} s")
        assert clocks.undecodable == 0 and len(clocks.commits) == groups
        del clocks
    # Memory in a run of its own: tracemalloc slows everything down.
    tracemalloc.start()
    clocks = ExactClocks()
    for key, value in records:
        clocks.apply(decode_record(key, value))
    held = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    print(f"synthetic {groups:,} groups x {partitions} partitions = {len(records):,} commits")
    print(f"  decode + fold: median {statistics.median(rates):,.0f} records/s")
    print(f"  memory held by the clocks: {held:.0f} MB ({held * 1e6 / len(records):.0f} bytes per group-partition)")


def real(groups: int, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import RetriableError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition

    from lagwatch.collect.offsets_reader import OffsetsTopicReader, ReaderState
    from lagwatch.config import ClusterConfig
    from lagwatch.devbroker import LocalBroker

    with LocalBroker(settings={"offsets.topic.num.partitions": "8"}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=60000)
        topics = [f"t{i:04d}" for i in range((groups + 19) // 20)]
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        say(f"committing offsets for {groups:,} groups x {partitions} partitions ...")
        t0 = time.monotonic()
        for g in range(groups):
            offsets = {KafkaTopicPartition(topics[g // 20], p): OffsetAndMetadata(0, "", -1) for p in range(partitions)}
            for attempt in range(60):  # a fresh broker has no __consumer_offsets yet: no coordinator at first
                try:
                    admin.alter_group_offsets(f"g{g:07d}", offsets)
                    break
                except RetriableError:
                    if attempt == 59:
                        raise
                    time.sleep(0.5)
            if (g + 1) % 1000 == 0:
                say(f"  {g + 1:,}/{groups:,} groups committed ({time.monotonic() - t0:.0f} s)")
        admin.close()
        clocks = ExactClocks()
        done = threading.Event()

        def sink(records: Sequence[Record], caught_up: bool) -> None:
            for r in records:
                clocks.apply(r)
            if caught_up:
                done.set()

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.monotonic()
        reader = OffsetsTopicReader("bench", ClusterConfig(bootstrap_servers=[broker.bootstrap]), sink).start()
        while not done.wait(5):
            say(f"  reading: {reader.status().records:,} records ({time.monotonic() - t0:.0f} s)")
        elapsed = time.monotonic() - t0
        reader.stop()
        assert reader.status().state in (ReaderState.LIVE, ReaderState.STOPPED)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"real: {groups:,} groups x {partitions} partitions on a fresh Kafka 4.1.2")
    print(
        f"  reader live after {elapsed:.1f} s ({reader.status().records:,} records, {clocks.records / elapsed:,.0f}/s)"
    )
    print(f"  peak RSS {after:.0f} MB ({after - before:+.0f} MB while reading)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", default="100000x10", help="GROUPSxPARTITIONS, or 'none'")
    parser.add_argument("--real", default="none", help="GROUPSxPARTITIONS on a fresh local Kafka, or 'none'")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.synthetic != "none":
        g, p = (int(x) for x in args.synthetic.split("x"))
        synthetic(g, p, args.repeat)
    if args.real != "none":
        g, p = (int(x) for x in args.real.split("x"))
        real(g, p)


if __name__ == "__main__":
    main()
