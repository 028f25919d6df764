"""One poll of G groups x P partitions: lagwatch, KMinion's approach and kafka-consumer-groups, in the same run.

Starts a fresh local Apache Kafka, creates the groups (committed offsets on P partitions each, spread over
topics of P partitions; a size's groups are deleted before the next size's are created), then measures, on the
same broker and the same groups:

  - lagwatch: one poll through `ClusterPoller` (the code `lagwatch run` and `check` use): the first poll (admin
    client start included), then the median of --repeat more; the wall time of each step of the poll.
  - KMinion's approach (KMinion's admin-API scrape mode, `minion/consumer_group_offsets.go` and
    `minion/list_offsets.go`), emulated in Python with kafka-python's own KafkaAdminClient:
      1. ListGroups: `list_groups()` on one admin client (KMinion: one ListGroups, then its group filter);
      2. one OffsetFetch per group: `list_group_offsets(group_id)` (kafka-python 3's name for the older
         `list_consumer_group_offsets`; one group per call, so one OffsetFetch v8 holding one group) from a pool
         of --kminion-workers threads (10), each with its own KafkaAdminClient (its own connection and I/O
         thread) and a fixed share of the groups (worker i of W takes groups i, i + W, i + 2W, ... of the sorted
         list, so its coordinator cache stays warm from one poll to the next). At most 10
         OffsetFetch are in flight at once. KMinion starts one goroutine per group (errgroup, no limit) and
         franz-go pipelines the requests on one connection per broker; a kafka-python client waits for each
         answer of a blocking call, so a pool of clients is the closest bounded equivalent;
      3. the log ends and starts of every committed partition: `list_partition_offsets()` once for LATEST and
         once for EARLIEST, the two at once on two of the pool's clients (each: one Metadata, then one
         ListOffsets per leader; KMinion: one cached Metadata per scrape, then ListOffsets -1 and -2 for every
         partition, sharded per leader by franz-go). KMinion asks for every topic of the cluster; the emulation
         asks only for the partitions the groups committed on (what lagwatch asks for);
      4. the lag of every group-partition, clamped at 0 as KMinion does.
    The first poll includes starting the clients and finding each group's coordinator (one FindCoordinator
    per group: kafka-python looks up one key per call); the median is of --repeat more polls. KMinion's
    separate consumer-group collector (DescribeGroups, batched per coordinator) is not part of this.
  - kafka-consumer-groups --describe --all-groups (Kafka's ConsumerGroupCommand from the same jars), median of
    --tool-repeat runs, JVM start included, as an operator runs it.

lagwatch and the KMinion emulation each run in a subprocess of their own (this file with --worker), so each
peak RSS figure is that process's alone (VmHWM: the interpreter, kafka-python and its clients, and what one
approach holds). Requests are counted on the wire in each worker: every request kafka-python's connections send
(`KafkaConnection._send_request`, so ApiVersions on a new connection, Metadata refreshes and retries count
too), per poll, by type. The broker's CPU time (user + system, /proc) per poll, the mean over the repeated polls
less the idle broker's use in as long (sampled for 5 s just before), tells what each approach costs the broker
whatever the client's language.

    python bench/poll_bench.py --sizes 1000x10,10000x10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic, OffsetSpec
from kafka.errors import NoError, RetriableError
from kafka.net.connection import KafkaConnection
from kafka.structs import OffsetAndMetadata

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter
from lagwatch.devbroker import LocalBroker, run_kafka_tool

GROUPS_PER_TOPIC = 20
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
REQUEST_TIMEOUT_MS = 120_000
IDLE_SAMPLE_S = 5.0  # how long the broker's idle CPU use is sampled before the repeated polls


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the groups ---------------------------------------------------------------------------------------------


def create_groups(bootstrap: str, prefix: str, groups: int, partitions: int, per_topic: int = GROUPS_PER_TOPIC) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    topics = [f"{prefix}-t{i:04d}" for i in range((groups + per_topic - 1) // per_topic)]
    for start in range(0, len(topics), 100):
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics[start : start + 100]])
    say(f"  {len(topics)} topics x {partitions} partitions created")
    t0 = time.monotonic()
    for i in range(groups):
        topic = topics[i // per_topic]
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(0, "", -1) for p in range(partitions)}
        commit_with_retry(admin, f"{prefix}-g{i:05d}", offsets)
        if (i + 1) % 500 == 0:
            say(f"  {i + 1}/{groups} groups committed ({time.monotonic() - t0:.0f}s)")
    admin.close()


def delete_groups(bootstrap: str, prefix: str, groups: int) -> None:
    """Removes a size's groups once it is measured, so that each size's run sees only its own groups
    (kafka-consumer-groups --all-groups describes every group of the cluster)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    names = [f"{prefix}-g{i:05d}" for i in range(groups)]
    for start in range(0, len(names), 1000):
        results = admin.delete_groups(names[start : start + 1000])
        failed = {g: e for g, e in results.items() if e != "OK"}
        assert not failed, f"could not delete {len(failed)} groups, e.g. {next(iter(failed.items()))}"
    admin.close()


def commit_with_retry(admin: KafkaAdminClient, group: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
    # A fresh broker answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists: more than 10 s on a busy
    # machine.
    deadline = time.monotonic() + 120
    while True:
        try:
            errors = admin.alter_group_offsets(group, offsets)
            failed = [e for e in errors.values() if e is not NoError]
            if not failed:
                return
            if not issubclass(failed[0], RetriableError):
                raise failed[0]()
        except RetriableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- request counting (in the workers) -----------------------------------------------------------------------


class WireCount:
    """Counts every request any kafka-python connection of this process sends, by type."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        original = KafkaConnection._send_request
        counts, lock = self.counts, self._lock

        def counted(conn: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                counts[request.name.removesuffix("Request")] += 1
            return original(conn, request, *args, **kwargs)

        KafkaConnection._send_request = counted  # type: ignore[method-assign]

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def since(self, before: Counter[str]) -> dict[str, int]:
        return dict(sorted((self.snapshot() - before).items()))


def peak_rss_mb() -> float:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries the parent's peak over into a child
    started with vfork + exec (as subprocess does), so a worker would report at least the parent's peak."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_polls(poll: Callable[[], Any], wire: WireCount, repeat: int, broker_pid: int) -> dict[str, Any]:
    """The first poll, then `repeat` more: wall times, the requests of each, and the broker's CPU time per poll
    (mean of the repeats, less what the idle broker uses in as long: it does not depend on the client's
    language, only on what the broker is asked)."""
    before = wire.snapshot()
    t0 = time.perf_counter()
    first = poll()
    first_s = time.perf_counter() - t0
    requests_first = wire.since(before)
    times, requests = [], []
    result = first
    idle_from, idle_cpu = time.perf_counter(), cpu_seconds(broker_pid)
    time.sleep(IDLE_SAMPLE_S)
    idle_rate = (cpu_seconds(broker_pid) - idle_cpu) / (time.perf_counter() - idle_from)
    broker_cpu, broker_from = cpu_seconds(broker_pid), time.perf_counter()
    for _ in range(repeat):
        before = wire.snapshot()
        t0 = time.perf_counter()
        result = poll()
        times.append(time.perf_counter() - t0)
        requests.append(wire.since(before))
    broker_cpu = cpu_seconds(broker_pid) - broker_cpu - idle_rate * (time.perf_counter() - broker_from)
    return {
        "result": result,
        "first_s": first_s,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "times_s": times,
        "requests_first": requests_first,
        "requests": requests[-1],
        "requests_vary": len({json.dumps(r, sort_keys=True) for r in requests}) > 1,
        "broker_cpu_s": broker_cpu / repeat,
        "broker_idle_cpu": idle_rate,
    }


# -- lagwatch (worker) ---------------------------------------------------------------------------------------

LAGWATCH_STEPS = ("_list_groups", "_read_groups", "_group_snapshots", "_log_offsets", "_broker_settings")


def worker_lagwatch(bootstrap: str, prefix: str, repeat: int, broker_pid: int) -> dict[str, Any]:
    wire = WireCount()
    config = ClusterConfig(
        bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]), request_timeout_s=120
    )
    poller = ClusterPoller("bench", config)
    # Wall time of each step of a poll, summed per poll (the steps run on the calling thread).
    steps: Counter[str] = Counter()

    def timing(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                steps[name] += time.perf_counter() - t0

        return timed

    for name in LAGWATCH_STEPS:
        setattr(poller, name, timing(name, getattr(poller, name)))
    per_poll: list[dict[str, float]] = []

    def poll() -> Any:
        steps.clear()
        t0 = time.perf_counter()
        snapshot = poller.poll()
        took = time.perf_counter() - t0
        assert snapshot.ok, snapshot.error
        # The rest: which partitions to ask for, the topic filter on every group-partition, the snapshot itself.
        per_poll.append({**steps, "rest": took - sum(steps.values())})
        return snapshot

    polls = timed_polls(poll, wire, repeat, broker_pid)
    snapshot = polls.pop("result")
    poller.close()
    repeats = per_poll[1:]
    return {
        **polls,
        "groups": len(snapshot.groups),
        "group_partitions": sum(len(g.committed) for g in snapshot.groups),
        "own_count": dict(sorted(snapshot.requests.items())),
        "steps_median_s": {n: statistics.median(p.get(n, 0.0) for p in repeats) for n in (*LAGWATCH_STEPS, "rest")},
        "peak_rss_mb": peak_rss_mb(),
    }


# -- KMinion's approach (worker) -----------------------------------------------------------------------------


class KMinionEmulation:
    """ListGroups, one OffsetFetch per group from a pool of admin clients, ListOffsets for the log ends."""

    def __init__(self, bootstrap: str, prefix: str, workers: int) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.workers = workers
        self.pool = ThreadPoolExecutor(workers)
        self.clients: list[KafkaAdminClient | None] = [None] * workers
        self.steps: dict[str, float] = {}

    def client(self, i: int) -> KafkaAdminClient:
        admin = self.clients[i]
        if admin is None:
            admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                client_id=f"kminion-emulation-{i}",
                request_timeout_ms=REQUEST_TIMEOUT_MS,
            )
            self.clients[i] = admin
        return admin

    def close(self) -> None:
        self.pool.shutdown()
        for admin in self.clients:
            if admin is not None:
                admin.close()

    def _offsets_of(self, i: int, groups: list[str]) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        admin = self.client(i)
        return {g: admin.list_group_offsets(g)[g] for g in groups[i :: self.workers]}

    def poll(self) -> tuple[int, int, int]:
        """(groups, group-partitions, group-partitions with lag > 0)."""
        t0 = time.perf_counter()
        if any(c is None for c in self.clients):  # first poll: start every client, in the pool's threads
            list(self.pool.map(self.client, range(self.workers)))
        t1 = time.perf_counter()
        listed = self.client(0).list_groups()
        groups = sorted(g["group_id"] for g in listed if g["group_id"].startswith(f"{self.prefix}-"))
        t2 = time.perf_counter()
        committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        for part in self.pool.map(lambda i: self._offsets_of(i, groups), range(self.workers)):
            committed.update(part)
        t3 = time.perf_counter()
        tps = {tp for offsets in committed.values() for tp in offsets}
        latest = self.pool.submit(self.client(0).list_partition_offsets, dict.fromkeys(tps, OffsetSpec.LATEST))
        earliest = self.pool.submit(
            self.client(1 % self.workers).list_partition_offsets, dict.fromkeys(tps, OffsetSpec.EARLIEST)
        )
        ends, starts = latest.result(), earliest.result()
        t4 = time.perf_counter()
        lagging = 0
        pairs = 0
        for offsets in committed.values():
            for tp, om in offsets.items():
                pairs += 1
                if max(0, ends[tp].offset - om.offset) > 0 and starts[tp].offset >= 0:
                    lagging += 1
        t5 = time.perf_counter()
        self.steps = {
            "start_clients": t1 - t0,
            "ListGroups": t2 - t1,
            "OffsetFetch_per_group": t3 - t2,
            "ListOffsets": t4 - t3,
            "lag": t5 - t4,
        }
        return len(groups), pairs, lagging


def worker_kminion(bootstrap: str, prefix: str, repeat: int, workers: int, broker_pid: int) -> dict[str, Any]:
    wire = WireCount()
    emulation = KMinionEmulation(bootstrap, prefix, workers)
    per_poll: list[dict[str, float]] = []

    def poll() -> tuple[int, int, int]:
        result = emulation.poll()
        per_poll.append(emulation.steps)
        return result

    polls = timed_polls(poll, wire, repeat, broker_pid)
    groups, pairs, _lagging = polls.pop("result")
    emulation.close()
    repeats = per_poll[1:]
    return {
        **polls,
        "groups": groups,
        "group_partitions": pairs,
        "workers": workers,
        "start_clients_s": per_poll[0]["start_clients"],
        "steps_median_s": {n: statistics.median(p[n] for p in repeats) for n in per_poll[0] if n != "start_clients"},
        "peak_rss_mb": peak_rss_mb(),
    }


def run_worker(which: str, broker: LocalBroker, prefix: str, repeat: int, workers: int) -> dict[str, Any]:
    """Runs one approach in a process of its own; its progress goes to stderr, its result comes back as JSON."""
    assert broker._proc is not None
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, "--bootstrap", broker.bootstrap]
    cmd += ["--prefix", prefix, "--repeat", str(repeat), "--kminion-workers", str(workers)]
    cmd += ["--broker-pid", str(broker._proc.pid)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, timeout=3600)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- kafka-consumer-groups -----------------------------------------------------------------------------------


def bench_kafka_tool(broker: LocalBroker, repeat: int) -> dict[str, Any]:
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
    return {"median_s": statistics.median(times), "first_s": times[0], "runs": len(times), "rows": rows}


# -- the report ----------------------------------------------------------------------------------------------


def requests_text(requests: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in requests.items()) or "none"


def report(results: list[tuple[int, int, dict[str, Any], dict[str, Any], dict[str, Any], tuple[float, ...]]]) -> None:
    print()
    print(
        "| groups x partitions | lagwatch first | lagwatch median | KMinion's approach first | "
        "KMinion's approach median | kafka-consumer-groups median | lagwatch vs KMinion's | lagwatch vs k-c-g |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for groups, partitions, ours, kminion, tool, _load in results:
        print(
            f"| {groups:,} x {partitions} | {ours['first_s']:.3f} s | {ours['median_s']:.3f} s "
            f"(min {ours['min_s']:.3f}) | {kminion['first_s']:.2f} s | {kminion['median_s']:.2f} s "
            f"(min {kminion['min_s']:.2f}) | {tool['median_s']:.2f} s ({tool['runs']} runs) | "
            f"{kminion['median_s'] / ours['median_s']:.0f}x | {tool['median_s'] / ours['median_s']:.0f}x |"
        )
    print()
    print(
        "| groups x partitions | approach | requests per poll (on the wire) | first poll | "
        "broker CPU per poll | peak RSS |"
    )
    print("|---|---|---|---|---|---|")
    for groups, partitions, ours, kminion, _tool, _load in results:
        for name, r in (("lagwatch", ours), (f"KMinion's approach ({kminion['workers']} workers)", kminion)):
            vary = " (varied between polls; last shown)" if r["requests_vary"] else ""
            print(
                f"| {groups:,} x {partitions} | {name} | {sum(r['requests'].values()):,}: "
                f"{requests_text(r['requests'])}{vary} | {sum(r['requests_first'].values()):,}: "
                f"{requests_text(r['requests_first'])} | {r['broker_cpu_s']:.2f} s | {r['peak_rss_mb']:.0f} MB |"
            )
    print()
    for groups, partitions, ours, kminion, tool, load in results:
        print(
            f"{groups:,} x {partitions}: lagwatch saw {ours['groups']:,} groups / {ours['group_partitions']:,} "
            f"group-partitions, KMinion's approach {kminion['groups']:,} / {kminion['group_partitions']:,}, "
            f"kafka-consumer-groups printed {tool['rows']:,} rows (first run {tool['first_s']:.2f} s); "
            f"load average at the start of the size {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        print(f"  lagwatch's own request count (Wire.sent): {requests_text(ours['own_count'])}")
        print(
            f"  broker idle CPU (subtracted): {ours['broker_idle_cpu']:.3f} and {kminion['broker_idle_cpu']:.3f} "
            "CPU-seconds per second, sampled before lagwatch's and KMinion's approach's polls"
        )
        print("  lagwatch poll steps (median): " + steps_text(ours["steps_median_s"]))
        print(
            "  KMinion's approach steps (median): "
            + steps_text(kminion["steps_median_s"])
            + f"; starting its {kminion['workers']} clients (first poll) {kminion['start_clients_s']:.2f} s"
        )
        print(f"  lagwatch polls: {times_text(ours['times_s'])}; KMinion's approach: {times_text(kminion['times_s'])}")


def steps_text(steps: dict[str, float]) -> str:
    return ", ".join(f"{name.strip('_')} {seconds:.3f} s" for name, seconds in steps.items())


def times_text(times: list[float]) -> str:
    return " ".join(f"{t:.3f}" for t in times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000x10,5000x10", help="comma-separated GROUPSxPARTITIONS")
    parser.add_argument("--repeat", type=int, default=7, help="polls measured after the first, per approach")
    parser.add_argument("--tool-repeat", type=int, default=3, help="kafka-consumer-groups runs")
    parser.add_argument("--kminion-workers", type=int, default=10, help="OffsetFetch threads (one client each)")
    parser.add_argument("--worker", choices=["lagwatch", "kminion"], help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "lagwatch":
        print(json.dumps(worker_lagwatch(args.bootstrap, args.prefix, args.repeat, args.broker_pid)))
        return 0
    if args.worker == "kminion":
        result = worker_kminion(args.bootstrap, args.prefix, args.repeat, args.kminion_workers, args.broker_pid)
        print(json.dumps(result))
        return 0
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    results = []
    with LocalBroker(heap="1g") as broker:
        say(f"broker at {broker.bootstrap}")
        for n, (groups, partitions) in enumerate(sizes):
            prefix = f"b{n}"
            label = f"[{groups} groups x {partitions} partitions]"
            say(f"{label} creating")
            create_groups(broker.bootstrap, prefix, groups, partitions)
            load = os.getloadavg()
            say(f"{label} lagwatch polls (own process), load average {load[0]:.2f}")
            ours = run_worker("lagwatch", broker, prefix, args.repeat, args.kminion_workers)
            say(f"{label}   median {ours['median_s']:.3f} s")
            say(f"{label} KMinion's approach, {args.kminion_workers} workers (own process)")
            kminion = run_worker("kminion", broker, prefix, args.repeat, args.kminion_workers)
            say(f"{label}   median {kminion['median_s']:.3f} s")
            say(f"{label} kafka-consumer-groups --describe --all-groups")
            tool = bench_kafka_tool(broker, args.tool_repeat)
            say(f"{label}   median {tool['median_s']:.2f} s")
            results.append((groups, partitions, ours, kminion, tool, load))
            if n + 1 < len(sizes):
                delete_groups(broker.bootstrap, prefix, groups)
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
