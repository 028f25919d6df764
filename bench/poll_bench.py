"""One poll of G groups x P partitions: lagwatch against Kafka's own kafka-consumer-groups, in the same run.

Starts a fresh local Apache Kafka, creates the groups (committed offsets on P partitions each, spread over
topics of P partitions), then measures:
  - lagwatch: wall time of one poll (first, then the median of --repeat more), Kafka requests by type, peak RSS;
  - kafka-consumer-groups --describe --all-groups on the same groups (JVM start included, as a user runs it).

    python bench/poll_bench.py --sizes 1000x10,5000x10
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoError, RetriableError
from kafka.structs import OffsetAndMetadata

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter
from lagwatch.devbroker import LocalBroker, run_kafka_tool

GROUPS_PER_TOPIC = 20
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def create_groups(bootstrap: str, prefix: str, groups: int, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    topics = [f"{prefix}-t{i:04d}" for i in range((groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC)]
    for start in range(0, len(topics), 100):
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics[start : start + 100]])
    say(f"  {len(topics)} topics x {partitions} partitions created")
    t0 = time.monotonic()
    for i in range(groups):
        topic = topics[i // GROUPS_PER_TOPIC]
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(0, "", -1) for p in range(partitions)}
        commit_with_retry(admin, f"{prefix}-g{i:05d}", offsets)
        if (i + 1) % 500 == 0:
            say(f"  {i + 1}/{groups} groups committed ({time.monotonic() - t0:.0f}s)")
    admin.close()


def commit_with_retry(admin: KafkaAdminClient, group: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
    # A fresh broker answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists.
    for attempt in range(50):
        try:
            errors = admin.alter_group_offsets(group, offsets)
            failed = [e for e in errors.values() if e is not NoError]
            if not failed:
                return
            if not issubclass(failed[0], RetriableError):
                raise failed[0]()
        except RetriableError:
            if attempt == 49:
                raise
            time.sleep(0.2)


def bench_lagwatch(bootstrap: str, prefix: str, repeat: int) -> dict[str, object]:
    config = ClusterConfig(
        bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]), request_timeout_s=120
    )
    poller = ClusterPoller("bench", config)
    first = poller.poll()
    assert first.ok, first.error
    times, snapshot = [], first
    for _ in range(repeat):
        t0 = time.perf_counter()
        snapshot = poller.poll()
        times.append(time.perf_counter() - t0)
        assert snapshot.ok, snapshot.error
    poller.close()
    return {
        "groups": len(snapshot.groups),
        "group_partitions": sum(len(g.committed) for g in snapshot.groups),
        "first_s": first.duration_s,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "requests_first": dict(first.requests),
        "requests": dict(snapshot.requests),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def bench_kafka_tool(broker: LocalBroker, repeat: int) -> dict[str, object]:
    assert broker.libs is not None
    times = []
    rows = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = run_kafka_tool(
            broker.libs,
            CONSUMER_GROUP_COMMAND,
            "--bootstrap-server",
            broker.bootstrap,
            "--describe",
            "--all-groups",
            timeout=1800,
        )
        times.append(time.perf_counter() - t0)
        rows = sum(1 for line in out.splitlines() if line.split()[:1] and line.split()[0].startswith("b"))
    return {"median_s": statistics.median(times), "runs": len(times), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000x10,5000x10", help="comma-separated GROUPSxPARTITIONS")
    parser.add_argument("--repeat", type=int, default=7, help="lagwatch polls measured after the first")
    parser.add_argument("--tool-repeat", type=int, default=3, help="kafka-consumer-groups runs")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    results = []
    with LocalBroker(heap="1g") as broker:
        say(f"broker at {broker.bootstrap}")
        for n, (groups, partitions) in enumerate(sizes):
            prefix = f"b{n}"
            say(f"[{groups} groups x {partitions} partitions] creating")
            create_groups(broker.bootstrap, prefix, groups, partitions)
            say(f"[{groups} groups x {partitions} partitions] lagwatch polls")
            ours = bench_lagwatch(broker.bootstrap, prefix, args.repeat)
            say(f"[{groups} groups x {partitions} partitions] kafka-consumer-groups --describe --all-groups")
            theirs = bench_kafka_tool(broker, args.tool_repeat)
            results.append((groups, partitions, ours, theirs))
    print()
    print(
        "| groups x partitions | lagwatch first poll | lagwatch median poll | kafka-consumer-groups median | speed-up |"
    )
    print("|---|---|---|---|---|")
    for groups, partitions, ours, theirs in results:
        speedup = float(theirs["median_s"]) / float(ours["median_s"])  # type: ignore[arg-type]
        print(
            f"| {groups} x {partitions} | {ours['first_s']:.3f} s | {ours['median_s']:.3f} s "
            f"(min {ours['min_s']:.3f}) | {theirs['median_s']:.2f} s ({theirs['runs']} runs) | {speedup:.0f}x |"
        )
    print()
    for groups, partitions, ours, _ in results:
        print(
            f"{groups} x {partitions}: {ours['groups']} groups, {ours['group_partitions']} group-partitions; "
            f"requests per poll {ours['requests']} (first poll {ours['requests_first']}); "
            f"peak RSS of the bench process {ours['peak_rss_mb']:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
