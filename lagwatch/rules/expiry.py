"""Committed offsets about to expire under offsets.retention.minutes, and offsets that vanished.

When offsets can expire depends on the group's kind (Kafka 2.1+ / KIP-211, KIP-848 coordinator):
  classic, Empty            every offset, counted from the moment the group became Empty
  classic, Stable           offsets of topics no member subscribes to, from each partition's last commit
  classic, rebalancing      nothing
  simple (assign + commit)  every offset, from each partition's last commit
  KIP-848 consumer group    offsets of topics no member subscribes to (all, once members leave), from last commit
  other protocols           nothing
Clocks: exact where lagwatch reads `__consumer_offsets` (the coordinator's own commit and state timestamps);
else what polls saw. A clock lagwatch did not see start (first start, a group that appeared already Empty) is taken
at the first time lagwatch looked: the expiry it gives is the latest possible one, so lagwatch warns only when it
is sure the offsets expire soon, and never pages for a clock it does not know. Exact clocks close that gap.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from lagwatch.history import Clock, ClusterHistory
from lagwatch.model import SEVERITY_OF, BrokerSettings, ClusterSnapshot, Finding, GroupKind, Severity, TopicPartition
from lagwatch.rules.context import GroupContext
from lagwatch.rules.resolver import RuleResolver
from lagwatch.rules.text import duration, partitions, timestamp

KAFKA_DEFAULT_RETENTION_MINUTES = 10080
KAFKA_DEFAULT_CHECK_INTERVAL_MS = 600_000


@dataclass(frozen=True)
class Retention:
    seconds: float
    check_interval_s: float
    source: str


_last_retention: tuple[object, int | None, int | None, Retention | None] = (None, None, None, None)


def retention_for(snapshot: ClusterSnapshot, coordinator: int | None, override_minutes: int | None) -> Retention:
    """Asked for every group at every poll, nearly always with the answer just given: that one is kept by the
    identity of the poll's brokers (hashing them for the cache took 1% of a 100k-partition step)."""
    global _last_retention
    brokers, last_coordinator, last_override, last = _last_retention
    if brokers is snapshot.brokers and last_coordinator == coordinator and last_override == override_minutes:
        assert last is not None
        return last
    answer = _retention(snapshot.brokers, coordinator, override_minutes)
    _last_retention = (snapshot.brokers, coordinator, override_minutes, answer)  # one tuple: safe across threads
    return answer


@functools.lru_cache(maxsize=1024)  # the same few answers for every group of a poll
def _retention(
    all_brokers: tuple[BrokerSettings, ...], coordinator: int | None, override_minutes: int | None
) -> Retention:
    brokers = [b for b in all_brokers if b.offsets_retention_minutes]
    check_ms = next(
        (b.offsets_retention_check_interval_ms for b in brokers if b.broker_id == coordinator), None
    ) or min(
        (b.offsets_retention_check_interval_ms or KAFKA_DEFAULT_CHECK_INTERVAL_MS for b in brokers),
        default=KAFKA_DEFAULT_CHECK_INTERVAL_MS,
    )
    if override_minutes is not None:
        return Retention(
            override_minutes * 60.0, check_ms / 1000, f"offsets.retention.minutes={override_minutes} (configured)"
        )
    own = next((b for b in brokers if b.broker_id == coordinator), None)
    if own is not None and own.offsets_retention_minutes:
        minutes = own.offsets_retention_minutes
        return Retention(
            minutes * 60.0, check_ms / 1000, f"offsets.retention.minutes={minutes} on broker {own.broker_id}"
        )
    if brokers:
        # Coordinator unknown: the shortest retention any broker runs with.
        b = min(brokers, key=lambda b: b.offsets_retention_minutes or 0)
        minutes = b.offsets_retention_minutes or KAFKA_DEFAULT_RETENTION_MINUTES
        return Retention(
            minutes * 60.0, check_ms / 1000, f"offsets.retention.minutes={minutes} (shortest of the brokers)"
        )
    return Retention(
        KAFKA_DEFAULT_RETENTION_MINUTES * 60.0,
        check_ms / 1000,
        f"offsets.retention.minutes={KAFKA_DEFAULT_RETENTION_MINUTES} (Kafka's default; the brokers did not say)",
    )


def _candidates(ctx: GroupContext) -> tuple[Candidates, str]:
    """The committed partitions that can expire now, each with the clock its expiry counts from (in no order)."""
    g, history = ctx.group, ctx.history
    if ctx.track is None or not g.committed:
        return [], ""

    def last_commit(tps: Iterable[TopicPartition]) -> list[tuple[TopicPartition, Clock]]:
        return history.commit_clocks(g.group_id, tps)

    if g.kind is GroupKind.SHARE:
        # A share group commits nothing: its share-partitions' state is the share coordinator's (in
        # __share_group_state), which offsets.retention.minutes does not expire.
        return [], ""
    if g.kind is GroupKind.CLASSIC and g.state == "Empty":
        empty = history.empty_clock(g.group_id)
        if empty is None:
            return [], ""
        return _SameClock(g.committed, empty), EMPTY_CLOCK
    if g.kind is GroupKind.SIMPLE:
        return last_commit(g.committed), "the last commit"
    if g.kind is GroupKind.STREAMS:
        # Kafka's group coordinator takes a streams group as subscribed to no topic (StreamsGroup.
        # isSubscribedToTopic is false) and expires by commit time: every offset counts from its own last commit,
        # members or not. A running application's idle input partition loses its offset after the retention.
        return last_commit(g.committed), "the last commit (streams group: whether members run or not)"
    if (
        g.kind is GroupKind.CLASSIC
        and g.state == "Stable"
        and g.members
        and all(m.subscribed_topics for m in g.members)
    ) or g.kind is GroupKind.CONSUMER:
        # A KIP-848 regex subscriber lists no topic names: its assigned topics count (they were warned critical).
        return last_commit(g.unsubscribed(g.committed)), "the last commit (topic not subscribed)"
    return [], ""


EMPTY_CLOCK = "the moment the group became Empty"


class _SameClock:
    """Partitions that all count from one clock (an Empty group's), paired with it only when iterated: only the
    expiry rule, when it fires, reads them one by one (a list of pairs per Empty group was 1.4 us, this 0.2 us)."""

    __slots__ = ("clock", "tps")

    def __init__(self, tps: Collection[TopicPartition], clock: Clock) -> None:
        self.tps, self.clock = tps, clock  # tps: the group's committed offsets (a dict: its keys), not copied

    def __iter__(self) -> Iterator[tuple[TopicPartition, Clock]]:
        clock = self.clock
        return ((tp, clock) for tp in self.tps)


# The partitions that can expire, each with its clock: a list, or an Empty group's partitions and its one clock.
Candidates = list[tuple[TopicPartition, Clock]] | _SameClock


class Outlook(NamedTuple):
    """When a group's committed offsets can expire. Every group has one at every poll (the exporter shows the
    earliest), and only the expiry rule, when it fires, needs them one by one: `rows` is built on demand."""

    candidates: Candidates
    retention: Retention
    counted_from: str
    expires_at: float  # the earliest

    @property
    def rows(self) -> list[tuple[float, TopicPartition, Clock]]:
        """(expiry time, partition, clock), earliest first."""
        seconds = self.retention.seconds
        return sorted((clock.since + seconds, tp, clock) for tp, clock in self.candidates)

    def fraction(self, now: float, expires_at: float | None = None) -> float:
        at = self.expires_at if expires_at is None else expires_at
        return (now - (at - self.retention.seconds)) / self.retention.seconds


def group_outlook(ctx: GroupContext) -> Outlook | None:
    """When this group's offsets can expire, computed once per poll (the expiry rule and the exporter both use it)
    and kept in the context's memo (not functools.cached_property: on Python 3.11 it takes a lock per call, a
    tenth of the rules' time)."""
    memo = ctx.memo
    if "expiry" not in memo:
        memo["expiry"] = outlook(ctx)
    result: Outlook | None = memo["expiry"]
    return result


def outlook(ctx: GroupContext) -> Outlook | None:
    rules, _ = ctx.rules()
    candidates, counted_from = _candidates(ctx)
    if not candidates:
        return None
    retention = retention_for(ctx.snapshot, ctx.group.coordinator_id, rules.expiry.retention_minutes)
    # An unobserved clock counts from the first time lagwatch looked: the latest possible expiry.
    # min(since) + seconds is min(since + seconds): adding the same number keeps the order of floats.
    if isinstance(candidates, _SameClock):
        earliest = candidates.clock.since + retention.seconds
    else:
        earliest = min([clock.since for _, clock in candidates]) + retention.seconds
    return Outlook(candidates, retention, counted_from, earliest)


def offsets_expiring(ctx: GroupContext) -> Iterator[Finding]:
    rules, _ = ctx.rules()
    view = group_outlook(ctx)
    if not rules.expiry.enabled or view is None:
        return
    retention, counted_from, expires_at = view.retention, view.counted_from, view.expires_at
    fraction = view.fraction(ctx.now)
    if fraction >= rules.expiry.critical_fraction:
        severity = "critical"
    elif fraction >= rules.expiry.warning_fraction:
        severity = "warning"
    else:
        return
    rows = view.rows
    due = [tp for at, tp, _ in rows if view.fraction(ctx.now, at) >= rules.expiry.warning_fraction]
    lags = {(p.topic, p.partition): p for p in ctx.measure.lag.partitions}
    skipped = sum(lags[tp].lag or 0 for tp in due if tp in lags)
    replay = sum(
        (lags[tp].log_end or 0) - (lags[tp].log_start or 0)
        for tp in due
        if tp in lags and lags[tp].log_end is not None and lags[tp].log_start is not None
    )
    observed = all(c.observed for _, tp, c in rows if tp in due)
    if observed:
        when = f"expire at {timestamp(expires_at)} (in {duration(expires_at - ctx.now)}; deletion runs up to {duration(retention.check_interval_s)} later)"
    else:
        when = (
            f"expire by {timestamp(expires_at)} at the latest (in {duration(expires_at - ctx.now)}; lagwatch has not "
            f"seen {counted_from.split(' (')[0]} happen, so they may expire sooner)"
        )
    yield ctx.finding(
        "expiry",
        severity,
        f"committed offsets of {ctx.group.group_id} on {partitions([(tp.topic, tp.partition) for tp in due])} {when}, "
        f"counted from {counted_from} under {retention.source}. After that a restarted consumer falls back to "
        f"auto.offset.reset: 'latest' skips {skipped} unconsumed records, 'earliest' replays {replay}",
        details={
            "expires_at": expires_at,
            "observed": observed,
            "fraction": round(fraction, 4),
            "retention_s": retention.seconds,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in due],
            "skipped_if_latest": skipped,
            "replayed_if_earliest": replay,
        },
        for_s=rules.expiry.for_s,
        runbook_url=rules.expiry.runbook_url,
    )


def _vanish_cause(clock: Clock | None, at: float, retention: Retention, group_gone: bool) -> tuple[str, bool] | None:
    """Why committed offsets vanished: (words, certain), or None when they were deleted on purpose before they
    could have expired (a deleted group or OffsetDelete): that is an operator's act, not an incident."""
    if clock is None:
        return "expired or were deleted", False
    due = clock.since + retention.seconds
    if clock.observed and at < due - 60:
        return None
    if not clock.observed and at < due - 60:
        return "expired or were deleted", False  # lagwatch did not see the clock start: it cannot tell
    return "expired", True


def offsets_vanished(snapshot: ClusterSnapshot, history: ClusterHistory, resolver: RuleResolver) -> Iterator[Finding]:
    """Offsets that had been committed and are gone because they expired. Reported while history remembers them.
    Offsets of a deleted topic, and offsets deleted (with their group, or by OffsetDelete) before they could have
    expired, are not incidents: nothing is reported for them."""
    current = {g.group_id: g for g in snapshot.groups}
    for group_id, track in sorted(history.groups.items()):
        vanished = track.vanished
        if vanished is None or track.kind == GroupKind.SHARE.value:  # a queue's positions are no commits
            continue
        group = current.get(group_id)
        if group is not None and group.error is not None:
            continue
        still_gone = {tp: o for tp, o in vanished.offsets.items() if group is None or tp not in group.committed}
        if not still_gone:
            continue
        rules, _ = resolver.resolve(snapshot.cluster, group_id)
        if not rules.expired.enabled:
            continue
        retention = retention_for(snapshot, None, rules.expiry.retention_minutes)
        causes = {
            tp: _vanish_cause(vanished.clocks.get(tp), vanished.at, retention, vanished.group_gone) for tp in still_gone
        }
        expired = {tp: o for tp, o in still_gone.items() if causes[tp] is not None}
        if not expired:
            continue
        certain = all(cause[1] for cause in causes.values() if cause is not None)
        cause = "expired" if certain else "expired or were deleted"
        where = partitions([(tp.topic, tp.partition) for tp in sorted(expired)])
        state = "the group is gone" if vanished.group_gone else "the group still exists"
        yield Finding(
            rule="expired",
            severity=SEVERITY_OF[rules.expired.severity] if certain else Severity.WARNING,
            cluster=snapshot.cluster,
            group=group_id,
            labels=resolver.labels(snapshot.cluster, group_id, None)[0],
            summary=f"committed offsets of {group_id} on {where} {cause} at {timestamp(vanished.at)} ({state}): a restarted "
            f"consumer will fall back to auto.offset.reset",
            details={
                "vanished_at": vanished.at,
                "group_gone": vanished.group_gone,
                "certain": certain,
                "partitions": [
                    {"topic": tp.topic, "partition": tp.partition, "last_committed": o}
                    for tp, o in sorted(expired.items())
                ],
            },
            for_s=rules.expired.for_s,
            runbook_url=rules.expired.runbook_url,
            keep_firing_for_s=rules.expired.keep_firing_for_s,
        )
