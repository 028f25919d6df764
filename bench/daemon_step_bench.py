"""The whole daemon step after the poll, at scale: history, rules, alert lifecycle, notifications to the outbox,
persistence (the state database) and the /metrics rendering, through the daemon's own code (Daemon.poll_cluster),
fed with synthetic snapshots so that only lagwatch's work is measured. (The poll itself is `poll_bench.py`.)

The groups are Empty and lag (a cluster-wide incident: every group stopped), so every group has alerts, the storm
path is taken, and the state database has rows for all of them. Each step advances every log end. Before the
timed steps, `--warm` polls are folded into the history, so that its per-poll rings are as full as in a daemon
that has run for half an hour (memory and history saves are measured at that steady state).

    python bench/daemon_step_bench.py --sizes 10000x10 --steps 8
    python bench/daemon_step_bench.py --sizes 10000x10 --steps 8 --kafka   # collect included, on a real Kafka

A real broker's poll, saved once and replayed: every phase after the poll on real data, without the broker on the
same cores (its garbage collector and the machine's drift moved the whole step by 5-10% from run to run; the
replay's CPU time moves by about 1%, fine enough to see a change of 2-3%):

    python bench/daemon_step_bench.py --kafka --bootstrap 127.0.0.1:39092 --save-poll /tmp/poll.pickle
    python bench/daemon_step_bench.py --replay /tmp/poll.pickle --steps 8 --warm 10 --receivers 1
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lagwatch import CORE, gc_policy, malloc_policy
from lagwatch.alerts import Receiver
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import (
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    PartitionOffsets,
    TopicPartition,
)

GROUPS_PER_TOPIC = 10
RECORDS_PER_PARTITION = 200  # with --kafka: every group lags 200 records, over the bench's threshold of 100


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class SyntheticPoller:
    def __init__(self, groups: int, partitions: int, interval: float) -> None:
        self.groups, self.partitions, self.interval = groups, partitions, interval
        self.t = time.time() - 3600
        self.polls = 0
        topics = (groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC
        self.tps = [[TopicPartition(f"t{t:05d}", p) for p in range(partitions)] for t in range(topics)]
        self.group_snapshots = tuple(
            GroupSnapshot(
                group_id=f"g{g:06d}",
                state="Empty",
                protocol_type="consumer",
                kind=GroupKind.CLASSIC,
                coordinator_id=1,
                committed={tp: CommittedOffset(1000) for tp in self.tps[g // GROUPS_PER_TOPIC]},
            )
            for g in range(groups)
        )

    def poll(self) -> ClusterSnapshot:
        self.polls += 1
        self.t += self.interval
        end = 1000 + 50 * self.polls
        partitions = {tp: PartitionOffsets(0, end) for tps in self.tps for tp in tps}
        return ClusterSnapshot(
            cluster="bench",
            taken_at=self.t,
            duration_s=0.0,
            groups=self.group_snapshots,
            partitions=partitions,
            brokers=(BrokerSettings(1, 10080, 600000),),
        )

    def close(self) -> None:
        pass


def _load() -> str:
    return "-".join(f"{x:.2f}" for x in os.getloadavg()[:2])  # 1 and 5 minutes: the machine beside the figures


def current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def timed(owner: Any, name: str, sink: dict[str, list[float]]) -> None:
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink.setdefault(name, []).append(time.perf_counter() - t0)

    try:
        setattr(owner, name, wrapper)
    except AttributeError:  # a method of a class compiled with mypyc (setup.py) cannot be replaced
        say(f"  {type(owner).__name__}.{name} is compiled: not timed apart")


class GcPauses:
    """Seconds the cyclic garbage collector ran, by generation (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.started = 0.0
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self.started


def kafka_poller(bootstrap: str, groups: int, partitions: int, create: bool = True, per_topic: int = 20) -> Any:
    """G groups on a real broker (poll_bench's groups: committed at 0, `per_topic` groups a topic), then records on
    every partition so that every group lags: the poll is the daemon's own ClusterPoller. `create=False`: an earlier
    run created them on this broker."""
    from kafka import KafkaProducer
    from poll_bench import create_groups

    from lagwatch.collect import ClusterPoller

    poller = SpacedPolls(ClusterPoller("bench", ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False)))
    if not create:
        return poller
    create_groups(bootstrap, "d", groups, partitions, per_topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=65536)
    topics = (groups + per_topic - 1) // per_topic
    for t in range(topics):
        for p in range(partitions):
            for _ in range(RECORDS_PER_PARTITION):
                producer.send(f"d-t{t:04d}", b"x", partition=p)
        if (t + 1) % 100 == 0:
            say(f"  records on {t + 1}/{topics} topics")
    producer.flush()
    producer.close()
    return poller


class SpacedPolls:
    """The real poller's snapshots, dated 30 s apart as with the default poll interval (the bench polls back to
    back): the rules' windows then hold as many polls as in a daemon, not the dozens that 1.5 s apart would give."""

    def __init__(self, poller: Any, interval: float = 30.0) -> None:
        self.poller, self.interval = poller, interval
        self.t = time.time() - 3600

    def poll(self) -> ClusterSnapshot:
        self.t += self.interval
        return dataclasses.replace(self.poller.poll(), taken_at=self.t)

    def close(self) -> None:
        self.poller.close()


class ReplayedPolls:
    """One real poll (`--save-poll`), replayed dated 30 s apart: the broker's figures stand still, as on the bench's
    broker, where nothing is produced or committed during the steps."""

    def __init__(self, path: str, interval: float = 30.0) -> None:
        with open(path, "rb") as f:
            self.snapshot: ClusterSnapshot = pickle.load(f)  # a file this bench wrote (--save-poll)
        self.interval = interval
        self.t = time.time() - 3600

    def poll(self) -> ClusterSnapshot:
        self.t += self.interval
        return dataclasses.replace(self.snapshot, taken_at=self.t)

    def close(self) -> None:
        pass


def save_poll(bootstrap: str, path: str) -> None:
    """The second poll of the groups on a running broker (the first finds their coordinators), saved to `path`."""
    from lagwatch.collect import ClusterPoller

    poller = ClusterPoller("bench", ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False))
    for _ in range(2):
        snapshot = poller.poll()
    poller.close()
    if not snapshot.ok:
        raise SystemExit(f"the poll failed: {snapshot.error}")
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
    rows = sum(len(g.committed) for g in snapshot.groups)
    say(f"saved a poll of {len(snapshot.groups):,} groups, {rows:,} group-partitions to {path}")


def run(
    groups: int,
    partitions: int,
    steps: int,
    warm: int,
    default_gc: bool,
    bootstrap: str | None,
    create: bool = True,
    receivers: int = 0,
    per_topic: int = 20,
    replay: str | None = None,
) -> None:
    interval = 30.0
    with tempfile.TemporaryDirectory() as state:
        settings = load_settings(
            state_dir=Path(state),
            http={"enabled": False},
            rules={"stopped": {"window_s": 60}, "lag": {"for_s": 0, "warning": {"offsets": 100}}},
            alerts={"group_wait_s": 0, "group_interval_s": 0},
            history_save_interval_s=0,  # save history every step: the worst case
        )
        poller: Any
        if replay is not None:
            poller = ReplayedPolls(replay, interval)
            groups = len(poller.snapshot.groups)
            partitions = round(sum(len(g.committed) for g in poller.snapshot.groups) / max(groups, 1))
        elif bootstrap is None:
            poller = SyntheticPoller(groups, partitions, interval)
        else:
            poller = kafka_poller(bootstrap, groups, partitions, create, per_topic)
        cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=interval, exact_clocks=False)
        daemon = Daemon(
            settings,
            clusters={"bench": cluster},
            notifiers={},
            poller_factory=lambda name, cfg: poller,
            reader_factory=None,
        )
        if receivers:  # receivers as notifiers without a route are (their workers are not started here)
            daemon.book.receivers = tuple(Receiver(f"receiver-{i}") for i in range(receivers))
        history = daemon.clusters["bench"].history
        for i in range(warm):  # the history as after `warm` polls: rings full, as a daemon's after half an hour
            history.observe(poller.poll())
            if (i + 1) % 10 == 0:
                say(f"  warming the history: {i + 1}/{warm} polls")
        if not default_gc:
            gc_policy.configure()  # as `lagwatch run` does once the state is loaded
        pauses = GcPauses()
        phases: dict[str, list[float]] = {}
        timed(poller, "poll", phases)  # the collect phase (0 s for the synthetic poller)
        timed(daemon.pipelines["bench"], "step", phases)
        timed(daemon, "save_alerts", phases)
        timed(daemon, "save_history", phases)  # the poll thread's part: handing the save to the history writer
        timed(daemon, "_write_history", phases)  # the history writer's: capturing, compressing and writing
        timed(history, "capture", phases)  # of it, the capture (under the cluster's lock)
        timed(daemon, "render_metrics", phases)
        timed(daemon.book, "due", phases)  # the notification pass over every alert, after every poll
        totals, gc_per_step, cpu = [], [], []
        load_before = _load()
        runtime = daemon.clusters["bench"]
        for i in range(steps):
            # A daemon polls every 30 s: the last history save (0.4 s on its own thread) is long done by the next
            # poll. Back to back, it would still be running while this step runs, and this step's save would
            # be put off: wait for it, outside the timed step (its figures are printed apart).
            if runtime.history_write is not None:
                runtime.history_write.result()
            t0, gc0, c0 = time.perf_counter(), sum(pauses.seconds), time.thread_time()
            daemon.poll_cluster("bench")
            totals.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            gc_per_step.append(sum(pauses.seconds) - gc0)
            say(f"  step {i + 1}/{steps}: {totals[-1]:.3f} s, {len(daemon.book.alerts)} alerts")
        collected = gc_policy.full_collection() if not default_gc else 0.0
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        settled_mb = current_rss_mb()
        writes = daemon.store.db.writes
        db_size = sum(f.stat().st_size for f in Path(state).glob("state.db*")) / 1e6
        daemon.stop()
    rest = totals[1:] or totals
    print(f"\n{groups} groups x {partitions} partitions = {groups * partitions:,} group-partitions")
    print(f"  {CORE}; load average {load_before} before the steps, {_load()} after")
    print(
        f"  whole step: first {totals[0]:.3f} s, median of the rest {statistics.median(rest):.3f} s "
        f"(fastest {min(rest):.3f} s: on a machine whose speed drifts, noise only ever adds time)"
    )
    cpu_rest = cpu[1:] or cpu
    print(
        f"  CPU time of the polling thread: median {statistics.median(cpu_rest):.3f} s (less exposed to a busy machine)"
    )
    gc_rest = gc_per_step[1:] or gc_per_step
    print(f"  of which the garbage collector: median {statistics.median(gc_rest) * 1000:.1f} ms a step")
    if not default_gc:
        print(f"  the scheduled full collection (every {gc_policy.FULL_EVERY_S:.0f} s): {collected * 1000:.0f} ms")
    for name, values in phases.items():
        later = values[1:] or values
        print(f"  {name:<15} median {statistics.median(later) * 1000:8.1f} ms   (first {values[0] * 1000:.1f} ms)")
    print(f"  history warmed with {warm} polls; GC {'defaults' if default_gc else 'as lagwatch run sets it'}")
    print(
        f"  RSS after the steps {settled_mb:.0f} MB, peak RSS {rss_mb:.0f} MB; state database {db_size:.1f} MB after {writes:,} row writes"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000x10", help="GROUPSxPARTITIONS[,...]")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warm", type=int, default=70, help="polls folded into the history before the steps")
    parser.add_argument("--default-gc", action="store_true", help="CPython's GC thresholds, not lagwatch run's")
    parser.add_argument("--receivers", type=int, default=0, help="notification receivers the alert book has")
    parser.add_argument("--kafka", action="store_true", help="a real local Kafka and the daemon's own poller")
    parser.add_argument(
        "--bootstrap", help="with --kafka: a running Kafka on which an earlier run created the groups (no new broker)"
    )
    parser.add_argument("--broker-heap", default="1g", help="with --kafka: the local broker's Java heap")
    parser.add_argument(
        "--groups-per-topic",
        type=int,
        default=20,
        help="with --kafka: groups committed on each topic (100,000 groups at 20 a topic are 50,000 partitions: two "
        "index maps each, past Linux's default vm.max_map_count of 65,530)",
    )
    parser.add_argument(
        "--default-malloc", action="store_true", help="glibc's moving mmap threshold, not lagwatch run's"
    )
    parser.add_argument("--save-poll", metavar="PATH", help="with --kafka --bootstrap: save one poll of its groups")
    parser.add_argument("--replay", metavar="PATH", help="step on a poll --save-poll saved (no broker)")
    args = parser.parse_args()
    if args.save_poll:
        if not (args.kafka and args.bootstrap):
            parser.error("--save-poll needs --kafka --bootstrap HOST:PORT")
        save_poll(args.bootstrap, args.save_poll)
        return
    if not args.default_malloc:
        malloc_policy.configure()  # as `lagwatch run` does first
    say(f"malloc: {'glibc defaults' if args.default_malloc else 'as lagwatch run sets it'}")
    if args.replay:
        say(f"replaying the poll saved in {args.replay}")
        run(0, 0, args.steps, args.warm, args.default_gc, None, receivers=args.receivers, replay=args.replay)
        return
    if args.kafka and args.bootstrap:
        for size in args.sizes.split(","):
            g, p = (int(x) for x in size.split("x"))
            run(g, p, args.steps, args.warm, args.default_gc, args.bootstrap, create=False, receivers=args.receivers)
        return
    if args.kafka:
        from lagwatch.devbroker import LocalBroker

        with LocalBroker(heap=args.broker_heap) as broker:
            for size in args.sizes.split(","):
                g, p = (int(x) for x in size.split("x"))
                say(f"{g} groups x {p} partitions on Kafka at {broker.bootstrap}: creating ...")
                run(
                    g,
                    p,
                    args.steps,
                    args.warm,
                    args.default_gc,
                    broker.bootstrap,
                    receivers=args.receivers,
                    per_topic=args.groups_per_topic,
                )
        return
    for size in args.sizes.split(","):
        g, p = (int(x) for x in size.split("x"))
        say(f"{g} groups x {p} partitions: building and stepping ...")
        run(g, p, args.steps, args.warm, args.default_gc, None, receivers=args.receivers)


if __name__ == "__main__":
    main()
