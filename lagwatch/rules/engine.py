"""The rules engine: snapshot + history + rules + the alerts already active -> findings. Pure, no I/O."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import cast

from lagwatch.history import ClusterHistory, GroupMeasure, GroupTrack, measure_group
from lagwatch.history.rings import NO_VALUE
from lagwatch.lag import GroupLag, LagState, group_lag
from lagwatch.model import ClusterSnapshot, Finding, PartitionOffsets, TopicPartition
from lagwatch.rules import expiry, progress, thresholds
from lagwatch.rules.context import GroupContext, rules_of
from lagwatch.rules.resolver import RuleResolver

GROUP_RULES: tuple[Callable[[GroupContext], Iterator[Finding]], ...] = (
    thresholds.lag_over_threshold,
    thresholds.below_log_start,
    progress.stalled,
    progress.no_commit,
    progress.stopped,
    progress.falling_behind,
    progress.rewind,
    expiry.offsets_expiring,
)


@dataclass(frozen=True)
class Evaluation:
    cluster: str
    now: float
    findings: tuple[Finding, ...]
    # Groups whose alerts must neither fire nor resolve this time (nothing reliable was read); None: all of them.
    frozen_groups: frozenset[str] | None
    # Alerts a rule could not judge this time (window not covered by unbroken observation): held as they are.
    held: frozenset[str] = frozenset()
    measures: Mapping[str, GroupMeasure] = field(default_factory=dict)
    expiries: Mapping[str, float] = field(default_factory=dict)  # group -> earliest time its offsets can expire
    # Groups read only in part (a partition's log end unreadable): (group, None) and (group, each such topic). Their
    # alerts not found this time, of the group itself or of those topics, stay as they are.
    partial_groups: frozenset[tuple[str, str | None]] = frozenset()


def evaluate(
    snapshot: ClusterSnapshot,
    history: ClusterHistory,
    resolver: RuleResolver,
    active: Mapping[str, str],
    use_last_stable: bool = False,
) -> Evaluation:
    """`history` must already hold `snapshot` (ClusterHistory.observe)."""
    now = snapshot.taken_at
    if not snapshot.ok:
        summary = (
            f"cluster {snapshot.cluster} cannot be polled ({snapshot.error_kind}): {snapshot.error}. "
            "Lag, stop and expiry rules are suspended until it answers again"
        )
        details = {"error_kind": snapshot.error_kind, "error": snapshot.error}
        found = _poll_problem(resolver, snapshot.cluster, None, "cluster_unreachable", summary, details)
        return Evaluation(snapshot.cluster, now, tuple(found), frozen_groups=None)

    findings = []
    held: set[str] = set()
    production_rates: dict[float, dict[TopicPartition, float | None]] = {}  # rate window start -> partition -> rate
    frozen: set[str] = set()
    partial: set[tuple[str, str | None]] = set()
    measures: dict[str, GroupMeasure] = {}
    expiries: dict[str, float] = {}
    active_rules = rules_of(active)  # once per evaluation, not per group
    combinations = 1  # the resolver's (group, topic) combinations this evaluation asks for: the cluster's own
    for group in snapshot.groups:
        combinations += 1
        group_rules = resolver.resolve(snapshot.cluster, group.group_id)
        rules = group_rules[0]
        if group.error is not None:
            frozen.add(group.group_id)
            summary = f"group {group.group_id} could not be read: {group.error}"
            findings += _poll_problem(
                resolver, snapshot.cluster, group.group_id, "group_unreadable", summary, {"error": group.error}
            )
            continue
        lag = group_lag(group, snapshot.partitions, use_last_stable)
        combinations += len(lag.topics)
        if lag.unknown:
            idle = _idle_since_last_read(lag, history.groups.get(group.group_id), history, now)
            if idle:
                # Read through, never written: the poll's own mapping is not copied (this may be every group of
                # a broker that is down).
                partitions = ChainMap(
                    idle, cast("MutableMapping[TopicPartition, PartitionOffsets]", snapshot.partitions)
                )
                lag = group_lag(group, partitions, use_last_stable)
        if lag.unknown:
            # Part of the picture is missing this poll (a partition's log end unreadable, as in an election): what
            # is found on the rest still fires, but the alerts of the group and of those topics not found are kept
            # as they are, not resolved (one such poll resolved a stuck consumer's alerts and paged them again at
            # the next), nor dropped if pending. Its other topics' alerts resolve as ever.
            # The group's own alerts too where it has no members (`stopped` on lag): with members, what the
            # group's rules say does not rest on that partition (a consumer back and committing stayed `stopped`
            # for as long as a partition had no leader).
            if not group.members:
                partial.add((group.group_id, None))
            partial.update((group.group_id, t.topic) for t in lag.topics if t.unknown)
        track = history.groups.get(group.group_id)
        if track is not None and len(lag.tps) > len(group.committed):  # some row without a commit: look
            # A partition it committed before has no commit this poll (a partition-level OffsetFetch error): as
            # for an unread log end, that topic's alerts and the group's are kept (the poll resolved its lag).
            missing = {
                tp.topic
                for tp, committed in zip(lag.tps, lag.committed, strict=True)
                if committed is None and _committed_before(track, tp)
            }
            if missing:
                partial.add((group.group_id, None))
                partial.update((group.group_id, topic) for topic in missing)
        if track is not None and track.missing:
            # Committed offsets this poll's answer left out, the group still there, neither assigned nor
            # subscribed (an Empty group's): vanished only if the next poll misses them too (history). Till then
            # the group's alerts and those topics' are kept (that poll resolved a `stopped`, paged again later).
            partial.add((group.group_id, None))
            partial.update((group.group_id, tp.topic) for tp in track.missing)
        # Rates only from unbroken observation: a rate across an outage would mix two different stories.
        evidence = history.evidence_start(group.group_id)
        rate_since = max(now - rules.rate_window_s, now if evidence is None else evidence)
        measure = measure_group(lag, history, now, rate_since, snapshot.record_times, production_rates)
        measures[group.group_id] = measure
        ctx = GroupContext(
            snapshot, history, group, measure, track, resolver, now, active, held, group_rules, active_rules
        )
        for rule in GROUP_RULES:
            findings.extend(rule(ctx))
        view = expiry.group_outlook(ctx)
        if view is not None:
            expiries[group.group_id] = view.expires_at
    findings.extend(expiry.offsets_vanished(snapshot, history, resolver))
    resolver.expect(snapshot.cluster, combinations)
    return Evaluation(
        snapshot.cluster,
        now,
        tuple(findings),
        frozenset(frozen),
        frozenset(held),
        measures,
        expiries,
        frozenset(partial),
    )


def _idle_since_last_read(
    lag: GroupLag, track: GroupTrack | None, history: ClusterHistory, now: float
) -> dict[TopicPartition, PartitionOffsets]:
    """The partitions whose log end could not be read this poll on which the group is committed at or past the
    last log end read, and was at the poll before too (it had consumed everything; a partition without a leader
    can take nothing more; on a busy topic its last records land after the last read): lag 0. Counted as
    nothing, such a partition held its topic's alerts: one offline for 5 hours kept a drained topic's lag
    critical for 5 hours. Not one the group lags on, nor one whose commit just moved (a consumer passing the
    stale end while producers write: it resolved a real lag): those stay unknown (held)."""
    idle: dict[TopicPartition, PartitionOffsets] = {}
    if track is None:
        return idle
    for tp, row in zip(lag.tps, lag.partitions, strict=True):
        if row.state is LagState.UNKNOWN and row.committed is not None:
            progress = track.partitions.get(tp)
            changed = progress.last_commit_change if progress is not None else None
            read = history.last_read_log_end(tp)
            if read is not None and row.committed >= read[1] and changed is not None and changed.since < now:
                idle[tp] = PartitionOffsets(row.log_start, row.committed)
    return idle


def _committed_before(track: GroupTrack, tp: TopicPartition) -> bool:
    """Whether the group had a commit on `tp` at a poll before this one (this one's sample is the newest)."""
    progress = track.partitions.get(tp)
    return progress is not None and any(v > NO_VALUE for v in progress.values[:-1])


def _poll_problem(
    resolver: RuleResolver, cluster: str, group: str | None, rule: str, summary: str, details: Mapping[str, object]
) -> list[Finding]:
    """A cluster or group that could not be read: one finding, routed by the labels in force for it."""
    rules, _ = resolver.resolve(cluster, group)
    cfg = getattr(rules, rule)
    if not cfg.enabled:
        return []
    labels, key_suffix = resolver.labels(cluster, group, None)
    return [
        Finding(
            rule,
            cfg.severity,
            cluster,
            group,
            labels,
            summary,
            details,
            cfg.for_s,
            cfg.runbook_url,
            rule + key_suffix,
            cfg.keep_firing_for_s,
        )
    ]
