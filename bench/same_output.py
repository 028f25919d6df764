"""Same output before and after a speed change: the daemon's whole output over a mixed, deterministic workload.

A change made for speed must not change what lagwatch says. This runs `Daemon.poll_cluster` (collect stand-in,
history, rules, alert lifecycle, notifications due, /metrics) over polls of a seeded synthetic cluster that has
every kind of group (classic with members, Empty classic, simple, KIP-848, other) and behaviour (keeping up,
lagging more and more, stalled, stopped, committing in bursts like a sink, never committing, rewinding, committed
below the log start, offsets near expiry), with faults (a failed poll, a blind spell, unreadable groups, log ends
unreadable), and writes after every poll the `/metrics` text, every alert (state, severity, summary, details,
labels) and every notification queued. Run it under two trees and compare the files:

    python bench/same_output.py --out /tmp/after.txt
    git worktree add /tmp/base HEAD && PYTHONPATH=/tmp/base python bench/same_output.py --out /tmp/before.txt
    cmp /tmp/before.txt /tmp/after.txt

It prints a digest per poll (the first poll that differs is where to look). Not a test: it compares two trees.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from lagwatch.alerts import Receiver
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
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

T0 = 1_700_000_000.0
INTERVAL = 30.0
BEHAVIOURS = ("keeps_up", "lags_more", "stalls", "stops", "sink", "no_commit", "rewinds", "slow", "idle")


class Workload:
    """Topics with their own production patterns and groups with their own consumption behaviour, all from one
    seed: the same polls under any tree."""

    def __init__(self, groups: int, seed: int) -> None:
        rng = random.Random(seed)
        self.poll_no = 0
        self.t = T0
        topics = max(4, groups // 6)
        self.topics = {f"t{i:04d}": rng.randint(1, 6) for i in range(topics)}
        # records per poll: idle, steady, or bursty (every fifth poll); some topics under short retention
        self.rate = {t: rng.choice((0, 0, 5, 40, 300, "burst")) for t in self.topics}
        self.retained = {t: rng.choice((None, None, None, 400)) for t in self.topics}
        self.ends = {TopicPartition(t, p): rng.randint(0, 5000) for t, n in self.topics.items() for p in range(n)}
        self.groups: list[dict[str, Any]] = []
        names = sorted(self.topics)
        for g in range(groups):
            kind = rng.choice((GroupKind.CLASSIC, GroupKind.CLASSIC, GroupKind.SIMPLE, GroupKind.CONSUMER))
            own = rng.sample(names, rng.choice((1, 1, 2, 3)))
            tps = [TopicPartition(t, p) for t in own for p in range(self.topics[t])]
            behaviour = rng.choice(BEHAVIOURS)
            start = {tp: max(0, self.ends[tp] - rng.choice((0, 0, 10, 150, 3000))) for tp in tps}
            self.groups.append(
                {
                    "id": f"g{g:05d}" if g % 7 else f"team-a.g{g:05d}",
                    "kind": kind,
                    "topics": own,
                    "tps": tps,
                    "behaviour": behaviour,
                    "committed": start,
                    "event_at": rng.randint(3, 12),  # when a stall, stop or rewind begins
                    "members": kind is not GroupKind.SIMPLE and behaviour != "stops",
                }
            )

    def _produce(self) -> None:
        for tp in self.ends:
            rate = self.rate[tp.topic]
            if rate == "burst":
                rate = 2000 if self.poll_no % 5 == 0 else 0
            self.ends[tp] += int(rate) + (tp.partition % 3 if rate else 0)

    def _consume(self, g: dict[str, Any]) -> None:
        b, n, committed = g["behaviour"], self.poll_no, g["committed"]
        for i, tp in enumerate(g["tps"]):
            end = self.ends[tp]
            if b == "keeps_up" or (b in ("stalls", "stops") and n < g["event_at"]):
                committed[tp] = end - (i % 2)
            elif b == "lags_more":
                committed[tp] = max(committed[tp], end - 40 * n - 100)
            elif b == "slow":
                committed[tp] = min(end, committed[tp] + 20)
            elif b == "sink" and n % 4 == 0:
                committed[tp] = end
            elif b == "rewinds":
                committed[tp] = end - 500 if n == g["event_at"] else max(committed[tp], end - 5)
            elif b == "no_commit" and i == 0:
                committed.pop(tp, None)
            elif b == "no_commit":
                committed[tp] = end
        if b == "stops" and n == g["event_at"]:
            g["members"] = False

    def poll(self) -> ClusterSnapshot:
        self.poll_no += 1
        n = self.poll_no
        self.t += INTERVAL if n != 12 else 200.0  # a blind spell before poll 12
        self._produce()
        for g in self.groups:
            self._consume(g)
        if n == 9:  # the cluster cannot be polled
            return ClusterSnapshot("c", self.t, 0.5, error="connection refused", error_kind="unreachable")
        partitions: dict[TopicPartition, PartitionOffsets] = {}
        for tp, end in self.ends.items():
            keep = self.retained[tp.topic]
            start = max(0, end - keep) if keep else 0
            if n in (5, 6) and tp.topic == "t0001":  # no leader: log end unread
                partitions[tp] = PartitionOffsets(None, None, error="LeaderNotAvailableError")
            else:
                partitions[tp] = PartitionOffsets(start, end)
        # Empty groups whose id ends in 9 vanish at poll 24 (expired, or deleted): `expired` or nothing
        groups = tuple(
            self._group(g, n) for g in self.groups if not (n >= 24 and g["id"].endswith("9") and not g["members"])
        )
        return ClusterSnapshot(
            cluster="c",
            taken_at=self.t,
            duration_s=0.5,
            groups=groups,
            partitions=partitions,
            brokers=(BrokerSettings(1, 10, 600000),),  # 10 minutes: Empty groups reach their expiry warnings
        )

    def _group(self, g: dict[str, Any], n: int) -> GroupSnapshot:
        if n == 7 and g["id"].endswith("3"):
            return GroupSnapshot(g["id"], "Unknown", "consumer", g["kind"], 1, error="CoordinatorLoadInProgressError")
        kind = g["kind"]
        members: tuple[Member, ...] = ()
        if g["members"]:
            members = (
                Member("m-1", "client-1", "/10.0.0.1", tuple(g["tps"][::2]), tuple(g["topics"])),
                Member("m-2", "client-2", "/10.0.0.2", tuple(g["tps"][1::2]), tuple(g["topics"])),
            )
        state = "Stable" if members else "Empty"
        return GroupSnapshot(
            group_id=g["id"],
            state=state,
            protocol_type="" if kind is GroupKind.SIMPLE else "consumer",
            kind=kind,
            coordinator_id=1,
            members=members,
            committed={tp: CommittedOffset(o) for tp, o in g["committed"].items()},
        )

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1500)
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    workload = Workload(args.groups, args.seed)
    now = [T0]
    with tempfile.TemporaryDirectory() as state, args.out.open("w") as out:
        settings = load_settings(
            state_dir=Path(state),
            http={"enabled": False},
            rules={
                "lag": {"for_s": 60, "warning": {"offsets": 1000, "seconds": 120}, "critical": {"seconds": 400}},
                "stalled": {"window_s": 90},
                "stopped": {"window_s": 60},
                "falling_behind": {"window_s": 120},
                "no_commit": {"window_s": 120},
                "rewind": {"window_s": 120},
                "rate_window_s": 120,
                "overrides": [
                    {"match": {"group": "team-a\\..*"}, "labels": {"team": "a"}, "rules": {"lag": {"for_s": 0}}},
                    {"match": {"topic": "t000[0-4]"}, "rules": {"lag": {"warning": {"offsets": 50}}}},
                ],
            },
            alerts={"group_wait_s": 0, "group_interval_s": 60, "repeat_interval_s": 300, "storm_threshold": 40},
            history_save_interval_s=3600,
        )
        cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=INTERVAL, exact_clocks=False)
        daemon = Daemon(
            settings,
            clusters={"c": cluster},
            notifiers={},
            clock=lambda: now[0],
            poller_factory=lambda name, cfg: workload,
            reader_factory=None,
        )
        daemon.book.receivers = (Receiver("oncall"), Receiver("team-a", "warning", (("team", "a"),)))
        try:
            for i in range(args.polls):
                now[0] = workload.t + INTERVAL + 1.0  # the flush after the poll sees the poll's time, a second on
                daemon.poll_cluster("c")
                text = _dump(daemon, i + 1)
                out.write(text)
                print(f"poll {i + 1:3d}: {hashlib.sha256(text.encode()).hexdigest()[:16]}", flush=True)
        finally:
            daemon.stop()
    alerts = len(daemon.book.alerts)
    print(
        f"{args.groups} groups, {args.polls} polls, {alerts} alerts at the end: written to {args.out}", file=sys.stderr
    )


def _dump(daemon: Daemon, poll: int) -> str:
    lines = [f"=== poll {poll}"]
    lines.append(daemon.metrics_body().decode())
    for key, alert in sorted(daemon.book.alerts.items()):
        lines.append(json.dumps({"key": key, **vars(alert)}, sort_keys=True, default=str))
    for delivery in daemon.outbox.deliveries:
        lines.append(json.dumps(delivery.notification.to_json(), sort_keys=True, default=str))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
