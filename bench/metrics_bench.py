"""/metrics with ~100k partition series: render time (once per poll) and scrape latency (cached bytes).

Builds one cluster's state synthetically (G groups x P partitions, each with committed offset, lag and lag
seconds), runs it through the real history, rules and exporter, serves it with the real HTTP server, and times
scrapes over loopback. For comparison it also reports what rendering on every scrape would cost (the render time).

    python bench/metrics_bench.py --groups 1000 --partitions 100 --scrapes 50
    python bench/metrics_bench.py --groups 10000 --partitions 10 --scrapes 5                     # the default
    python bench/metrics_bench.py --groups 10000 --partitions 10 --scrapes 5 --partition-series  # every partition

Series and bytes are printed beside KMinion's, measured on the same workload (10,000 groups x 10 partitions on one
Kafka 4.1.2 broker, issue #31): lagwatch's default granularity is per group and topic, as KMinion's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.history import ClusterHistory
from lagwatch.model import ClusterSnapshot, CommittedOffset, GroupKind, GroupSnapshot, PartitionOffsets, TopicPartition
from lagwatch.rules import RuleResolver, RulesConfig, evaluate
from lagwatch.runtime import ClusterRuntime


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def snapshots(groups: int, partitions: int, polls: int) -> list[ClusterSnapshot]:
    out = []
    for k in range(polls):
        t = 1_700_000_000.0 + 30 * k
        parts = {}
        gs = []
        for g in range(groups):
            topic = f"topic-{g:05d}"
            committed = {}
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                parts[tp] = PartitionOffsets(0, 1000 + 10 * k + p)
                committed[tp] = CommittedOffset(900 + 5 * k)
            gs.append(GroupSnapshot(f"group-{g:05d}", "Empty", "", GroupKind.SIMPLE, 1, (), committed))
        out.append(ClusterSnapshot("bench", t, 0.1, tuple(gs), parts))
    return out


class _NoPoller:
    """The runtime's state is built above; nothing polls Kafka in this bench."""

    def close(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument(
        "--partition-series", action="store_true", help="every group-partition's series (partition_metrics: all)"
    )
    args = parser.parse_args()
    say(f"building {args.groups} x {args.partitions} group-partitions (3 polls through history and rules)")
    history = ClusterHistory("bench")
    resolver = RuleResolver(RulesConfig())
    evaluation = None
    snaps = snapshots(args.groups, args.partitions, 3)
    for snap in snaps:
        history.observe(snap)
        evaluation = evaluate(snap, history, resolver, {})
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            state_dir=Path(tmp), http={"host": "127.0.0.1", "port": 0}, notifiers={"log": {"enabled": False}}
        )
        daemon = Daemon(settings, clusters={}, notifiers={})
        granularity = {"partition_metrics": {"groups": {"include": [".*"]}}} if args.partition_series else {}
        config = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], **granularity)
        runtime = ClusterRuntime("bench", config, _NoPoller(), history)
        runtime.latest, runtime.evaluation, runtime.last_success = snaps[-1], evaluation, snaps[-1].taken_at
        daemon.clusters["bench"] = runtime
        say("rendering")
        renders = []
        for _ in range(5):
            t0 = time.perf_counter()
            daemon.render_metrics()
            renders.append(time.perf_counter() - t0)
        body = daemon.metrics_body()
        text_bytes = len(body)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        partition_series = sum(1 for line in body.splitlines() if line.startswith(b"lagwatch_partition_"))
        from lagwatch.serve.http import HttpServer

        daemon.http = HttpServer(daemon).start()
        url = f"http://{daemon.http.address}/metrics"
        say(f"scraping {url} {args.scrapes} times")
        scrapes = []
        for _ in range(args.scrapes):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=30) as response:
                size = len(response.read())
            scrapes.append(time.perf_counter() - t0)
        daemon.stop()
    mode = "every partition (partition_metrics: all)" if args.partition_series else "default (group and topic)"
    print(f"load average {os.getloadavg()[0]:.2f}; granularity: {mode}")
    print(
        f"groups x partitions: {args.groups} x {args.partitions}; series: {series} ({partition_series} partition "
        f"series); text {text_bytes / 1e6:.1f} MB (a scrape read {size / 1e6:.1f} MB)"
    )
    print("KMinion on 10,000 x 10 (issue #31): 152,065 series, 15.6 MB")
    print(
        f"render once per poll: median {statistics.median(renders) * 1000:.0f} ms (min {min(renders) * 1000:.0f} ms, 5 runs)"
    )
    print(
        f"scrape of /metrics:   median {statistics.median(scrapes) * 1000:.1f} ms (min {min(scrapes) * 1000:.1f} ms, "
        f"p90 {sorted(scrapes)[int(len(scrapes) * 0.9)] * 1000:.1f} ms, {len(scrapes)} scrapes)"
    )
    print(
        f"rendering per scrape instead would cost the render time on every scrape: ~{statistics.median(renders) * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
