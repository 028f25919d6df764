"""A poll and a whole daemon step with 1,000 share groups and 1,000 streams groups beside 10,000 consumer groups, on
a real local Kafka (4.4.0 by default): requests per poll counted on the wire, poll and step times, peak RSS.

The 10,000 groups are poll_bench's (committed on 10 partitions each: 100k group-partitions, every one lagging a
few records). The share and streams groups are made as their clients make them, with the clients' own requests
(ShareGroupHeartbeat and StreamsGroupHeartbeat, whose schemas are read from the broker's kafka-clients jar): each
joins with one member subscribed to one of the topics, and leaves. They stay, Empty, with their state (a share
group's share-partitions, start offset unknown until a consumer fetches). Two polls are compared: the consumer
groups alone (a group filter), then every group.

    python bench/group_kinds_bench.py [--groups 10000 --partitions 10 --share 1000 --streams 1000 --steps 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from poll_bench import GROUPS_PER_TOPIC, create_groups

from lagwatch import gc_policy, malloc_policy
from lagwatch.collect import ClusterPoller
from lagwatch.collect.wire import Wire
from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import LocalBroker, ensure_kafka_jars

RECORDS = 20  # on every partition: every consumer group lags


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# kafka-python's registry holds response classes by weak reference: unreferenced, they were collected, and every
# answer was dropped (the requests timed out).
_KEPT: dict[str, Any] = {}


def heartbeat_classes(kafka_version: str) -> tuple[Any, Any]:
    """ShareGroupHeartbeatRequest and StreamsGroupHeartbeatRequest from the broker's own kafka-clients schemas."""
    libs = ensure_kafka_jars(kafka_version)
    package = Path(tempfile.mkdtemp(prefix="lagwatch-bench-")) / "bench_schemas"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with zipfile.ZipFile(next(libs.glob("kafka-clients-*.jar"))) as jar:
        for name in ("ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse", "StreamsGroupHeartbeatRequest",
                     "StreamsGroupHeartbeatResponse"):  # fmt: skip
            (package / f"{name}.json").write_bytes(jar.read(f"common/message/{name}.json"))
    sys.path.insert(0, str(package.parent))
    from kafka.protocol.api_message import ApiMessage

    classes = _KEPT
    for name in ("ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse", "StreamsGroupHeartbeatRequest",
                 "StreamsGroupHeartbeatResponse"):  # fmt: skip
        classes[name] = type(name, (ApiMessage,), {}, load_json="bench_schemas")
    return classes["ShareGroupHeartbeatRequest"], classes["StreamsGroupHeartbeatRequest"]


def join_and_leave(wire: Wire, requests: list[tuple[str, Any, Any]]) -> int:
    """Each (group, join request, leave request) sent to the group's coordinator: joins, then leaves. Returns the
    groups whose join the coordinator refused."""
    refused = 0
    if not requests:  # (--share 0 or --streams 0)
        return refused
    # A broker's first share or streams heartbeat waits for its coordinator's state to load (more than 20 s on two
    # loaded cores): the first join is retried until it is answered.
    group, join, _ = requests[0]
    deadline = time.monotonic() + 300
    while True:
        found, _ = wire.run(wire.find_coordinators, [group])
        (answer,) = wire.run(wire._send_all, [(found[group], join)]) if group in found else [None]
        if answer is not None and not isinstance(answer, BaseException) and not answer.error_code:
            break
        assert time.monotonic() < deadline, f"the first heartbeat was never answered: {answer}"
        time.sleep(1)
    for start in range(0, len(requests), 200):
        chunk = requests[start : start + 200]
        found, failed = wire.run(wire.find_coordinators, [g for g, _, _ in chunk])
        assert not failed, next(iter(failed.items()))
        joins = wire.run(wire._send_all, [(found[g], join) for g, join, _ in chunk])
        refused += sum(1 for a in joins if isinstance(a, BaseException) or a.error_code)
        wire.run(wire._send_all, [(found[g], leave) for g, _, leave in chunk])
        say(f"  {start + len(chunk)}/{len(requests)} groups joined and left")
    return refused


def make_groups(bootstrap: str, kafka_version: str, topics: list[str], shares: int, streams: int) -> None:
    share_cls, streams_cls = heartbeat_classes(kafka_version)
    poller = ClusterPoller("maker", ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False))
    poller.poll()  # connects
    wire = Wire(poller._admin, 60_000)
    made = []
    for i in range(shares):
        member, group, topic = str(uuid.uuid4()), f"share-g{i:05d}", topics[i % len(topics)]
        made.append(
            (
                group,
                share_cls(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]),
                share_cls(group_id=group, member_id=member, member_epoch=-1, subscribed_topic_names=None),
            )
        )
    say(f"share groups: {shares}")
    refused = join_and_leave(wire, made)
    made = []
    topology_cls = streams_cls.Topology
    subtopology_cls = topology_cls.Subtopology
    for i in range(streams):
        member, group, topic = str(uuid.uuid4()), f"streams-g{i:05d}", topics[i % len(topics)]
        topology = topology_cls(
            epoch=0,
            subtopologies=[
                subtopology_cls(
                    subtopology_id="0",
                    source_topics=[topic],
                    source_topic_regex=[],
                    state_changelog_topics=[],
                    repartition_sink_topics=[],
                    repartition_source_topics=[],
                    copartition_groups=[],
                )
            ],
        )
        process = str(uuid.uuid4())
        join = streams_cls(
            group_id=group, member_id=member, member_epoch=0, endpoint_information_epoch=0,
            rebalance_timeout_ms=30_000, topology=topology, active_tasks=[], standby_tasks=[], warmup_tasks=[],
            process_id=process, client_tags=[], task_offsets=[], task_end_offsets=[],
        )  # fmt: skip
        leave = streams_cls(group_id=group, member_id=member, member_epoch=-1, endpoint_information_epoch=0)
        made.append((group, join, leave))
    say(f"streams groups: {streams}")
    refused += join_and_leave(wire, made)
    poller.close()
    if refused:
        say(f"  ({refused} joins refused)")


def produce(bootstrap: str, topics: list[str], partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=65536)
    for t, topic in enumerate(topics):
        for p in range(partitions):
            for _ in range(RECORDS):
                producer.send(topic, b"x", partition=p)
        if (t + 1) % 100 == 0:
            say(f"  records on {t + 1}/{len(topics)} topics")
    producer.flush()
    producer.close()


def polls(bootstrap: str, include: str, steps: int) -> dict[str, Any]:
    config = ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False, groups=NameFilter(include=[include]))
    poller = ClusterPoller("bench", config)
    times, snapshot = [], None
    try:
        for _ in range(steps + 1):
            t0 = time.perf_counter()
            snapshot = poller.poll()
            times.append(time.perf_counter() - t0)
            assert snapshot.ok, snapshot.error
    finally:
        poller.close()
    assert snapshot is not None
    kinds: dict[str, int] = {}
    for g in snapshot.groups:
        kinds[g.kind.value] = kinds.get(g.kind.value, 0) + 1
    rows = sum(len(g.committed) + len(g.share_offsets) for g in snapshot.groups)
    return {"requests": dict(snapshot.requests), "median_s": statistics.median(times[1:]), "kinds": kinds, "rows": rows}


def daemon_steps(bootstrap: str, steps: int, include: str, default_gc: bool) -> list[float]:
    """Daemon.poll_cluster (collect, history, rules, alerts, state, metrics) over every group. Run in a process of
    its own (--steps-of), so that its peak RSS is the daemon's alone, with the malloc and GC policies `lagwatch run`
    sets (as bench/daemon_step_bench.py): with CPython's GC thresholds (--default-gc, what this bench measured
    until 2026-11-27) the collector took about 0.5 s of each step here, which the daemon never pays."""
    if not default_gc:
        malloc_policy.configure()  # as `lagwatch run` does first
    state = Path(tempfile.mkdtemp(prefix="lagwatch-bench-state-"))
    settings = load_settings(
        state_dir=state,
        http={"enabled": False},
        rules={"lag": {"warning": {"offsets": 10}, "for_s": 0}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    config = ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False, groups=NameFilter(include=[include]))
    daemon = Daemon(settings, clusters={"bench": config}, notifiers={})
    if not default_gc:
        gc_policy.configure()  # as `lagwatch run` does once the daemon is built
    times = []
    try:
        for i in range(steps + 1):
            t0 = time.perf_counter()
            daemon.poll_cluster("bench")
            times.append(time.perf_counter() - t0)
            say(f"  step {i}: {times[-1]:.2f} s")
    finally:
        daemon.stop()
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-version", default="4.4.0")
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--share", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--default-gc", action="store_true", help="daemon steps with CPython's GC thresholds, not lagwatch run's"
    )
    parser.add_argument("--steps-of", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    parser.add_argument("--include", default=".*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps_of:
        times = daemon_steps(args.steps_of, args.steps, args.include, args.default_gc)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{statistics.median(times)} {peak} " + " ".join(f"{t:.2f}" for t in times))
        return
    # The share coordinator's state topic with 1 partition, not 50: one broker, and its start costs less.
    settings = {"share.coordinator.state.topic.num.partitions": "1"}
    with LocalBroker(kafka_version=args.kafka_version, heap="2g", settings=settings) as broker:
        bootstrap = broker.bootstrap
        say(f"consumer groups: {args.groups} x {args.partitions} partitions")
        create_groups(bootstrap, "d", args.groups, args.partitions)
        topics = [f"d-t{i:04d}" for i in range((args.groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC)]
        produce(bootstrap, topics, args.partitions)
        say("polls of the consumer groups alone")
        alone = polls(bootstrap, "d-.*", args.steps)
        make_groups(bootstrap, args.kafka_version, topics, args.share, args.streams)
        say("polls of every group")
        every = polls(bootstrap, ".*", args.steps)
        steps_of = {}
        for name, include in (("the consumer groups alone", "d-.*"), ("every group", ".*")):
            say(f"whole daemon steps over {name}")
            done = subprocess.run(
                [sys.executable, __file__, "--steps", str(args.steps), "--steps-of", bootstrap, "--include", include,
                 *(["--default-gc"] if args.default_gc else [])],
                stdout=subprocess.PIPE, text=True, check=True,
            )  # fmt: skip
            steps_of[name] = done.stdout.split()
    load = Path("/proc/loadavg").read_text().split()[:3]
    gc_used = "CPython's defaults" if args.default_gc else "as lagwatch run sets it"
    print(f"Kafka {args.kafka_version}, load average {' '.join(load)}; GC in the daemon steps: {gc_used}")
    for name, result in (("consumer groups alone", alone), ("every group", every)):
        requests = ", ".join(f"{k} {v}" for k, v in sorted(result["requests"].items()))
        print(f"{name}: {result['kinds']}, {result['rows']} group-partitions")
        print(f"  requests per poll: {requests} ({sum(result['requests'].values())} in all)")
        print(f"  poll median {result['median_s']:.2f} s")
    for name, (median, peak, *steps) in steps_of.items():
        print(f"whole daemon step over {name}: median {float(median):.2f} s ({', '.join(steps)}); "
              f"peak RSS of the daemon's process {float(peak):.0f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
