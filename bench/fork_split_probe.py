"""Would a second process meet the 2-s step? A probe of the cheapest split, not a feature of lagwatch.

After the history has taken a poll, the step forks: the child evaluates the rules for the last part of the
groups and renders their series, then pickles its findings and compressed series back through a pipe; the parent
evaluates and renders the rest. The fork shares the history copy-on-write, so nothing is shipped to the child.
Each step is timed both ways on the same history (serial first), with synthetic polls as in daemon_step_bench.py
(10,000 Empty groups x 10 partitions, all lagging: 20,000 findings). The child reports its private memory.

    python bench/fork_split_probe.py --share 0.6 --steps 6

What it measured is in bench/README.md ("Tried: the step split across two processes").
"""

from __future__ import annotations

import argparse
import copyreg
import dataclasses
import os
import pickle
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from daemon_step_bench import SyntheticPoller, say

from lagwatch import gc_policy, malloc_policy
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot
from lagwatch.rules import evaluate
from lagwatch.serve import metrics


def _proxy(mapping: dict[str, object]) -> types.MappingProxyType[str, object]:
    return types.MappingProxyType(mapping)


copyreg.pickle(types.MappingProxyType, lambda m: (_proxy, (dict(m),)))  # findings' details and labels


def private_mb() -> float:
    with open("/proc/self/smaps_rollup") as rollup:
        return sum(int(line.split()[1]) for line in rollup if line.startswith("Private_")) / 1024


class Probe:
    def __init__(self, groups: int, partitions: int, warm: int) -> None:
        settings = load_settings(
            state_dir=Path(tempfile.mkdtemp()),
            http={"enabled": False},
            rules={"stopped": {"window_s": 60}, "lag": {"for_s": 0, "warning": {"offsets": 100}}},
            alerts={"group_wait_s": 0, "group_interval_s": 0},
            history_save_interval_s=1e9,
        )
        self.poller = SyntheticPoller(groups, partitions, 30.0)
        cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30.0, exact_clocks=False)
        self.daemon = Daemon(
            settings,
            clusters={"bench": cluster},
            notifiers={},
            poller_factory=lambda name, cfg: self.poller,
            reader_factory=None,
        )
        self.runtime, self.pipeline = self.daemon.clusters["bench"], self.daemon.pipelines["bench"]
        for i in range(warm):
            self.runtime.history.observe(self.poller.poll())
            if (i + 1) % 10 == 0:
                say(f"  warming the history: {i + 1}/{warm} polls")
        gc_policy.configure()
        self.daemon.poll_cluster("bench")  # the alerts exist before the timed steps

    def _evaluate_and_render(self, snapshot: ClusterSnapshot) -> tuple[Any, list[metrics.FamilyPart]]:
        active = self.pipeline.book.active_severities("bench")
        evaluation = evaluate(snapshot, self.runtime.history, self.pipeline.resolver, active)
        self.runtime.latest, self.runtime.evaluation = snapshot, evaluation
        return evaluation, metrics.render_cluster(self.runtime)

    def serial(self) -> float:
        snapshot = self.poller.poll()
        self.runtime.history.observe(snapshot)
        t0 = time.perf_counter()
        self._evaluate_and_render(snapshot)
        return time.perf_counter() - t0

    def forked(self, share: float) -> dict[str, float]:
        snapshot = self.poller.poll()
        self.runtime.history.observe(snapshot)
        t0 = time.perf_counter()
        k = int(len(snapshot.groups) * share)
        theirs = dataclasses.replace(snapshot, groups=snapshot.groups[k:])
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its part, then out, never back into the caller's code
            try:
                os.close(read_end)
                c0 = time.perf_counter()
                evaluation, parts = self._evaluate_and_render(theirs)
                answer = (evaluation.findings, dict(evaluation.expiries), parts, time.perf_counter() - c0, private_mb())
                with os.fdopen(write_end, "wb") as out:
                    out.write(pickle.dumps(answer, protocol=5))
            finally:
                os._exit(0)
        os.close(write_end)
        t1 = time.perf_counter()
        evaluation, _ = self._evaluate_and_render(dataclasses.replace(snapshot, groups=snapshot.groups[:k]))
        t2 = time.perf_counter()
        with os.fdopen(read_end, "rb") as answer_pipe:
            data = answer_pipe.read()
        os.waitpid(pid, 0)
        t3 = time.perf_counter()
        findings, _, _, child_s, child_private = pickle.loads(data)
        t4 = time.perf_counter()
        return {
            "total_s": t4 - t0,
            "fork_s": t1 - t0,
            "parent_s": t2 - t1,
            "child_s": child_s,
            "wait_s": t3 - t2,
            "unpickle_s": t4 - t3,
            "answer_mb": len(data) / 2**20,
            "child_private_mb": child_private,
            "findings": len(findings) + len(evaluation.findings),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="10000x10", help="GROUPSxPARTITIONS")
    parser.add_argument("--share", type=float, default=0.6, help="the parent's share of the groups")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warm", type=int, default=70)
    args = parser.parse_args()
    malloc_policy.configure()
    groups, partitions = (int(x) for x in args.size.split("x"))
    say(f"{groups} groups x {partitions} partitions: building ...")
    probe = Probe(groups, partitions, args.warm)
    serial, forked = [], []
    with gc_policy.paused():  # as during a daemon's step
        for i in range(args.steps):
            serial.append(probe.serial())
            forked.append(probe.forked(args.share))
            say(f"  step {i + 1}/{args.steps}: serial {serial[-1]:.3f} s, split {forked[-1]['total_s']:.3f} s")
    print(f"\n{groups} groups x {partitions} partitions, the parent's share {args.share}, medians of {args.steps}")
    print(f"  rules + render, one process:  {statistics.median(serial):.3f} s")
    for key in forked[0]:
        print(f"  split, {key:<17} {statistics.median(f[key] for f in forked):8.3f}")
    print(f"  the parent's private memory: {private_mb():.0f} MB")


if __name__ == "__main__":
    main()
