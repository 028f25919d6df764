"""Builders of synthetic snapshots for the pure tests of history, rules and alerts."""

from __future__ import annotations

from collections.abc import Iterable

from lagwatch.alerts import AlertBook, AlertsConfig
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
from lagwatch.offsets_topic import Record
from lagwatch.rules import Evaluation, RuleResolver, RulesConfig
from lagwatch.step import ClusterPipeline

TP = TopicPartition("orders", 0)


def group(
    group_id: str = "g",
    committed: dict[TopicPartition, int] | None = None,
    state: str = "Stable",
    kind: GroupKind = GroupKind.CLASSIC,
    members: int = 1,
    subscribed: tuple[str, ...] = ("orders",),
    assigned: tuple[TopicPartition, ...] | None = None,
) -> GroupSnapshot:
    committed = committed if committed is not None else {TP: 0}
    assignment = (tuple(committed) if assigned is None else assigned) if members else ()
    return GroupSnapshot(
        group_id=group_id,
        state=state,
        protocol_type="" if kind is GroupKind.SIMPLE else "consumer",
        kind=kind,
        coordinator_id=1,
        members=tuple(
            Member(f"m{i}", f"c{i}", "/127.0.0.1", assignment if i == 0 else (), subscribed) for i in range(members)
        ),
        committed={tp: CommittedOffset(o) for tp, o in committed.items()},
    )


def snapshot(
    t: float,
    groups: list[GroupSnapshot],
    ends: dict[TopicPartition, int],
    starts: dict[TopicPartition, int] | None = None,
    retention_minutes: int = 10080,
    error: str | None = None,
) -> ClusterSnapshot:
    if error:
        return ClusterSnapshot("c", t, 0.01, error=error, error_kind="unreachable")
    starts = starts or {}
    return ClusterSnapshot(
        cluster="c",
        taken_at=t,
        duration_s=0.01,
        groups=tuple(groups),
        partitions={tp: PartitionOffsets(starts.get(tp, 0), end) for tp, end in ends.items()},
        brokers=(BrokerSettings(1, retention_minutes, 600000),),
    )


class Pipeline:
    """The daemon's own pipeline step, fed with synthetic snapshots, taking notifications after every step."""

    def __init__(self, rules: dict | None = None, alerts: dict | None = None, max_gap_s: float = 90.0) -> None:
        self.resolver = RuleResolver(RulesConfig.model_validate(rules or {}))
        self.book = AlertBook(AlertsConfig.model_validate(alerts or {"group_wait_s": 0, "group_interval_s": 0}))
        self.pipeline = ClusterPipeline.build("c", self.resolver, self.book, max_gap_s=max_gap_s)
        self.history = self.pipeline.history
        self.sent: list = []

    def step(self, snap: ClusterSnapshot, records: Iterable[Record] = (), caught_up: bool = False) -> Evaluation:
        evaluation = self.pipeline.step(snap, records, caught_up)
        notes = self.pipeline.due(snap.taken_at)
        for n in notes:  # delivered at once, as by a dispatcher that succeeds
            self.book.delivered(n)
        self.sent += notes
        return evaluation

    def firing(self) -> dict[str, str]:
        return {a.rule: a.severity for a in self.book.alerts.values() if a.state == "firing"}
