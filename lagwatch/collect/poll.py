"""One poll of one cluster -> one immutable ClusterSnapshot.

Requests per poll: ListGroups per broker, FindCoordinator once (only for groups whose coordinator is not
known yet), DescribeGroups and OffsetFetch per coordinator (ConsumerGroupDescribe, StreamsGroupDescribe, and
ShareGroupDescribe with DescribeShareGroupOffsets, where it coordinates such groups), one Metadata, ListOffsets
per leader and spec, and DescribeConfigs per broker when the broker settings are due. None of it grows with the
number of groups.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import OffsetSpec

from lagwatch.collect.assemble import group_snapshots, partitions_of, short_tails
from lagwatch.collect.checkpoints import checkpoint_group
from lagwatch.collect.client import open_admin, translate
from lagwatch.collect.kip848 import (
    ConsumerGroupDescribeRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
)
from lagwatch.collect.list_groups_answer import ListedGroup
from lagwatch.collect.wire import (
    COORDINATOR_ERRORS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    GroupAnswers,
    Wire,
)
from lagwatch.config import ClusterConfig
from lagwatch.errors import ClusterError
from lagwatch.model import (
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    PartitionOffsets,
    TopicPartition,
)

_RETENTION = "offsets.retention.minutes"
_CHECK_INTERVAL = "offsets.retention.check.interval.ms"
# What the brokers must answer for a group of each type ListGroups gives to be read, (request, lowest version):
# a type listed by brokers that lack it (share groups in Kafka 4.0's early access: ShareGroupDescribe v1 is 4.1's;
# streams or KIP-848 groups of an early-access release) is counted (ClusterSnapshot.unwatched_groups) and said
# (a blind spot), never an error per group at every poll, nor left out without a word.
_READ_WITH: dict[str, tuple[tuple[Any, int], ...]] = {
    "consumer": ((ConsumerGroupDescribeRequest, 0),),
    "streams": ((StreamsGroupDescribeRequest, 0),),
    "share": ((ShareGroupDescribeRequest, 1), (DescribeShareGroupOffsetsRequest, 0)),
}


def unreadable(group_type: str) -> str:
    needs = " and ".join(
        f"{cls.__name__.removesuffix('Request')}" + (f" v{v}" if v else "") for cls, v in _READ_WITH[group_type]
    )
    return f"{group_type} groups are listed, but these brokers do not answer {needs}: they are not watched"


# Said of a cluster whose brokers describe share groups but do not report their lag (DescribeShareGroupOffsets v1,
# KIP-1226, is Kafka 4.2's). Log end - start offset is no lag: a start offset stays put while the records after it
# are accepted (930 against a real 330, on 4.1.2), so lagwatch pages nothing on it.
SHARE_LAG_UNREPORTED = (
    "these brokers do not report share groups' lag (DescribeShareGroupOffsets v1 is Kafka 4.2's): share groups are "
    "described, their start offsets shown and their lag estimated as an upper bound (log end - start offset) in "
    "`check` and the API, and no lag rule judges them"
)


# Control records (transaction markers) a group may be committed below: one per transaction in the tail.
CONTROL_TAIL_RECORDS = 16


class ClusterPoller:
    """Keeps one admin connection to one cluster and turns each poll into a snapshot. Not thread-safe."""

    def __init__(self, name: str, config: ClusterConfig, clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.config = config
        self._clock = clock
        self._admin: Any = None
        self._coordinators: dict[str, int] = {}
        # The groups the last poll saw (or, at start, the history knew): one that ListGroups no longer lists is
        # asked of its coordinator before it counts as gone (_unlisted_gone).
        self._known: dict[str, ListedGroup] = {}
        self._previous_topics: set[str] = set()
        self.unwatched_groups: dict[str, int] = {}  # of the last ListGroups, by group type
        self.blind_spots: dict[str, str] = {}  # of the last poll: what lagwatch cannot see here, and why
        self._brokers: tuple[BrokerSettings, ...] = ()
        self._brokers_read_at = float("-inf")
        # Read again after a poll that failed (the cluster may have been restarted with other settings) and when a
        # broker was connected to anew since the last read (restarted, in a rolling restart that fails no poll):
        # offsets.retention.minutes changes only with a restart, and read hourly, a lowered one missed every
        # expiry (offsets deleted sooner looked deleted by hand) and a raised one paged critical for an hour.
        self._brokers_stale = False
        self._brokers_connections: dict[int, int] = {}
        # Short tails looked at: partition -> (log end, from offset, where its control records begin or None).
        # A log's records never change below its end: the answer stands until the log end moves.
        self._tails: dict[TopicPartition, tuple[int, int, int | None]] = {}
        self._log_ends: dict[TopicPartition, int] = {}  # the last poll's: a log whose end has not moved is idle

    def remember_groups(self, kinds: Mapping[str, str]) -> None:
        """The groups the history knows (group -> GroupKind value), at start: one missing from the first ListGroups
        is asked of its coordinator before it counts as gone, as at every later poll."""
        self._known = {
            group_id: _remembered(group_id, kind)
            for group_id, kind in kinds.items()
            if kind != GroupKind.CHECKPOINT.value
        }

    def close(self) -> None:
        self._brokers_connections = {}  # a new client counts its connections from none
        if self._admin is not None:
            admin, self._admin = self._admin, None
            with contextlib.suppress(Exception):  # closing a broken connection must not mask the real error
                admin.close()

    def poll(self) -> ClusterSnapshot:
        """Never raises for a Kafka failure: a failed poll is a snapshot with `error` set."""
        started = self._clock()
        t0 = time.monotonic()
        wire: Wire | None = None
        try:
            if self._admin is None:
                self._admin = open_admin(self.name, self.config)
            wire = Wire(self._admin, int(self.config.request_timeout_s * 1000))
            groups, partitions, record_times, missing = self._collect(wire)
            ahead = getattr(self._clock, "ahead_s", 0.0)  # the broker dates records by the world's clock
            if ahead and record_times:
                record_times = {key: at + ahead for key, at in record_times.items()}
            brokers = self._broker_settings(wire, started)
            return ClusterSnapshot(
                cluster=self.name,
                taken_at=started,
                duration_s=time.monotonic() - t0,
                groups=groups,
                partitions=partitions,
                brokers=brokers,
                requests=dict(wire.sent),
                record_times=record_times,
                missing_topics=missing,
                unwatched_groups=self.unwatched_groups,
                blind_spots=self.blind_spots,
            )
        except Exception as e:
            self._brokers_stale = True
            error = translate(self.name, e)
            if error.kind in ("unreachable", "auth_failed"):
                self.close()  # start from a fresh connection and fresh metadata next time
            return ClusterSnapshot(
                cluster=self.name,
                taken_at=started,
                duration_s=time.monotonic() - t0,
                requests=dict(wire.sent) if wire else {},
                error=error.detail,
                error_kind=error.kind,
            )

    # -- the steps of one poll ----------------------------------------------------------------------------

    def _collect(
        self, wire: Wire
    ) -> tuple[
        tuple[GroupSnapshot, ...],
        dict[TopicPartition, PartitionOffsets],
        dict[tuple[TopicPartition, int], float],
        frozenset[str],
    ]:
        listed = self._list_groups(wire)
        # A group the last poll saw that ListGroups does not list now is read from its coordinator with the others.
        # ListGroups leaves out, without an error, the groups of a coordinator that is being moved or was fenced (a
        # broker paused longer than its session, in a GC pause or a frozen VM, lists no group at all for a few
        # seconds after): taken for deleted, every group of that broker paged `expired`, its lag alerts resolved,
        # and all of it paged again at the next poll. Only its coordinator's word makes one gone.
        unlisted = {g: info for g, info in self._known.items() if g not in listed and self.config.groups.matches(g)}
        answers = self._read_groups(wire, {**listed, **unlisted} if unlisted else listed)
        for group_id in [g for g in unlisted if _unlisted_gone(g, answers)]:
            del unlisted[group_id]
        self._known = {**listed, **unlisted} if unlisted else listed
        groups = self._group_snapshots(sorted(self._known.values(), key=lambda g: g.group_id), answers)
        groups += tuple(checkpoint_group(n, c) for n, c in sorted(self.config.checkpoint_consumers.items()))
        # The topic filter once per topic and poll: per group-partition it was 200k RE2 matches (1 s) at 100k.
        kept = functools.cache(self.config.topics.matches)
        # Every group's partitions deduplicated before the filter: 100k group-partitions are a few thousand
        # partitions (a set comprehension filtering each group-partition was a fifth of the poll's CPU at 100k).
        seen = partitions_of(groups)
        needed = sorted(tp for tp in seen if kept(tp.topic))
        partitions, leaders, missing = self._log_offsets(wire, needed)
        # Topic filters apply to what a group shows as well as to what lagwatch asks for (nothing to take out of
        # any group when every partition is kept, as without a topic filter).
        if len(needed) != len(seen):
            groups = tuple(_only_topics(g, kept) for g in groups)
        partitions = self._control_tails(wire, groups, partitions, leaders)
        if answers.share_offsets:
            groups = tuple(_share_positions(g, partitions) if g.kind is GroupKind.SHARE else g for g in groups)
        return groups, partitions, self._record_times(wire, groups, partitions, leaders), missing

    def _control_tails(
        self,
        wire: Wire,
        groups: tuple[GroupSnapshot, ...],
        partitions: dict[TopicPartition, PartitionOffsets],
        leaders: dict[TopicPartition, int],
    ) -> dict[TopicPartition, PartitionOffsets]:
        """Transactional topics end each transaction with a control record (a marker) that no consumer receives:
        a consumer that took every record may stay committed below the log end, with a lag that is not one. For
        the partitions of an idle log (its end unchanged since the last poll) on which a group is committed a few
        records below the end, the records in between are looked at (one Fetch per leader, once per log end)."""
        ends = {tp: o.log_end for tp, o in partitions.items() if o.log_end is not None}
        previous, self._log_ends = self._log_ends, ends
        idle = {tp: end for tp, end in ends.items() if previous.get(tp) == end}
        # idle partition -> the lowest committed offset in its short tail (a busy cluster, every log growing, costs
        # nothing more)
        short = short_tails(groups, idle, CONTROL_TAIL_RECORDS) if idle else {}
        wanted: dict[TopicPartition, tuple[int, int]] = {}
        known: dict[TopicPartition, int | None] = {}
        for tp, offset in short.items():
            cached = self._tails.get(tp)
            if cached is not None and cached[0] == idle[tp] and cached[1] <= offset:
                known[tp] = cached[2]
            else:
                wanted[tp] = (offset, idle[tp])
        if wanted:  # only definite answers are kept: a failed look is tried again at the next poll
            known.update(wire.run(wire.control_tails, leaders, wanted))
        self._tails = {tp: (idle[tp], short[tp], begins) for tp, begins in known.items()}
        if not any(begins is not None for begins in known.values()):
            return partitions
        marked = dict(partitions)
        for tp, begins in known.items():
            if begins is not None:
                marked[tp] = replace(partitions[tp], consumable_end=begins)
        return marked

    def _record_times(
        self,
        wire: Wire,
        groups: tuple[GroupSnapshot, ...],
        partitions: dict[TopicPartition, PartitionOffsets],
        leaders: dict[TopicPartition, int],
    ) -> dict[tuple[TopicPartition, int], float]:
        """Exact mode: timestamps of the records at the committed offsets of the partitions lagging most."""
        above = self.config.exact_lag_seconds_above
        if above is None:
            return {}
        lagging: dict[tuple[TopicPartition, int], int] = {}
        for g in groups:
            for tp, c in g.committed.items():
                p = partitions.get(tp)
                if p and p.log_end is not None and p.log_end - c.offset >= above and (p.log_start or 0) <= c.offset:
                    lagging[(tp, c.offset)] = max(lagging.get((tp, c.offset), 0), p.log_end - c.offset)
        chosen = sorted(lagging, key=lambda k: -lagging[k])[: self.config.exact_lag_seconds_max_partitions]
        wanted: dict[TopicPartition, list[int]] = {}
        for tp, offset in chosen:
            wanted.setdefault(tp, []).append(offset)
        return wire.run(wire.record_times, leaders, wanted) if wanted else {}

    def _list_groups(self, wire: Wire) -> dict[str, ListedGroup]:
        broker_ids = wire.broker_ids()
        listed, failed = wire.run(wire.list_groups, broker_ids)
        if failed:
            broker, error = next(iter(failed.items()))
            if isinstance(error, Errors.SaslAuthenticationFailedError | Errors.AuthorizationError):
                raise error
            # Some broker answered: the known groups the others coordinate are not listed, and are read from their
            # coordinators with the groups that are (none looks deleted: _unlisted_gone). A broker down, or too
            # slow to answer, failed every poll of the cluster, and with it every other broker's groups.
            if len(failed) == len(broker_ids):
                raise ClusterError(self.name, "error", f"ListGroups failed on broker {broker}: {type(error).__name__}")
        watched, unwatched = {}, Counter[str]()
        readable: dict[str, bool] = {}  # the brokers' versions asked once per type listed
        for g in listed:
            if not self.config.groups.matches(g.group_id):
                continue
            kind = g.group_type
            if kind in _READ_WITH:
                if kind not in readable:
                    readable[kind] = all(wire.supports(cls, version) for cls, version in _READ_WITH[kind])
                if not readable[kind]:
                    unwatched[kind] += 1
                    continue
            watched[g.group_id] = g
        self.unwatched_groups = dict(unwatched)
        spots = {f"{kind}_groups": unreadable(kind) for kind in sorted(unwatched)}
        if readable.get("share") and not wire.supports(DescribeShareGroupOffsetsRequest, 1):
            spots["share_lag"] = SHARE_LAG_UNREPORTED
        self.blind_spots = spots
        return watched

    def _read_groups(self, wire: Wire, listed: dict[str, ListedGroup]) -> GroupAnswers:
        answers = GroupAnswers()
        pending = sorted(listed)
        # KIP-848 and streams groups answer GROUP_ID_NOT_FOUND to DescribeGroups: they are described with
        # ConsumerGroupDescribe and StreamsGroupDescribe.
        modern = {
            g: info.group_type for g, info in listed.items() if info.group_type in ("consumer", "streams", "share")
        }
        for attempt in range(2):  # a moved or loading coordinator gets one more try within the same poll
            unknown = [g for g in pending if g not in self._coordinators]
            found, failed = wire.run(wire.find_coordinators, unknown)
            self._coordinators.update(found)
            for g, error in failed.items():
                answers.errors[g] = error
            by_coordinator: dict[int, list[str]] = {}
            for g in pending:
                if g in self._coordinators:
                    by_coordinator.setdefault(self._coordinators[g], []).append(g)
                    answers.errors.pop(g, None)
            wire.run(wire.read_groups, by_coordinator, modern, answers)
            # (A tuple of classes: `COORDINATOR_ERRORS | ...` raised TypeError, and any group's error failed the poll.)
            retry = [
                g
                for g, e in answers.errors.items()
                if isinstance(e, (*COORDINATOR_ERRORS, Errors.KafkaConnectionError))
            ]
            for g in retry:
                self._coordinators.pop(g, None)
            if not retry or attempt == 1:
                break
            pending = retry
            for g in retry:
                answers.errors.pop(g, None)
                answers.described.pop(g, None)
            time.sleep(0.2)
        return answers

    def _group_snapshots(self, listed: list[ListedGroup], answers: GroupAnswers) -> tuple[GroupSnapshot, ...]:
        return group_snapshots(listed, answers, self._coordinators)

    def _log_offsets(
        self, wire: Wire, needed: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, PartitionOffsets], dict[TopicPartition, int], frozenset[str]]:
        # Topics of the previous poll ride along in the same Metadata request: a topic that vanished was deleted,
        # which tells a deletion from an offset expiry.
        topics = {tp.topic for tp in needed}
        asked_topics = sorted(topics | self._previous_topics)
        self._previous_topics = topics
        if not asked_topics:
            return {}, {}, frozenset()
        leaders, topic_errors = wire.run(wire.partition_leaders, asked_topics)
        missing = frozenset(t for t, e in topic_errors.items() if e == "UnknownTopicOrPartitionError")
        # A partition without a leader (-1: its replicas' brokers down, an election under way) is not asked: no one
        # can answer for it (sent to node -1, the request raised and failed the whole poll, and with it every
        # other partition's lag for as long as the partition was offline).
        asked = {tp: leader for tp in needed if (leader := leaders.get(tp, -1)) >= 0}
        specs = [(OffsetSpec.LATEST, READ_UNCOMMITTED), (OffsetSpec.EARLIEST, READ_UNCOMMITTED)]
        if self.config.read_committed:
            specs.append((OffsetSpec.LATEST, READ_COMMITTED))
        results = wire.run(wire.list_offsets, asked, specs)
        ends, starts = results[0], results[1]
        stable = results[2] if self.config.read_committed else None
        partitions: dict[TopicPartition, PartitionOffsets] = {}
        for tp in needed:
            if tp not in asked:
                unasked = (
                    "LeaderNotAvailableError"
                    if tp in leaders
                    else topic_errors.get(tp.topic, "UnknownTopicOrPartition")
                )
                partitions[tp] = PartitionOffsets(None, None, None, unasked)
                continue
            error = ends.errors.get(tp) or starts.errors.get(tp) or (stable.errors.get(tp) if stable else None)
            partitions[tp] = PartitionOffsets(
                log_start=starts.offsets.get(tp),
                log_end=ends.offsets.get(tp),
                last_stable=stable.offsets.get(tp) if stable else None,
                error=error,
            )
        return partitions, asked, missing

    def _broker_settings(self, wire: Wire, now: float) -> tuple[BrokerSettings, ...]:
        """offsets.retention.* from every broker: read at `broker_settings_refresh_s`, after a failed poll, and when
        a broker was connected to anew since (it may have been restarted with others); a failure keeps the last
        known values."""
        connections = wire.connections()
        reconnected = any(n > self._brokers_connections.get(b, 0) for b, n in connections.items())
        due = now - self._brokers_read_at >= self.config.broker_settings_refresh_s
        if self._brokers and not (due or self._brokers_stale or reconnected):
            return self._brokers
        try:
            configs = wire.broker_configs(wire.broker_ids(), [_RETENTION, _CHECK_INTERVAL])
        except Exception:
            return self._brokers
        self._brokers_stale, self._brokers_connections = False, wire.connections()  # after: it may connect
        self._brokers = tuple(
            BrokerSettings(
                broker_id=b,
                offsets_retention_minutes=_int(c.get(_RETENTION)),
                offsets_retention_check_interval_ms=_int(c.get(_CHECK_INTERVAL)),
            )
            for b, c in sorted(configs.items())
        )
        self._brokers_read_at = now
        return self._brokers


def _remembered(group_id: str, kind: str) -> ListedGroup:
    """A group the history knows, as ListGroups would list it (its coordinator's answer fills in the rest)."""
    return ListedGroup(
        group_id=group_id,
        protocol_type="consumer" if kind in (GroupKind.CLASSIC.value, GroupKind.CONSUMER.value) else "",
        state=None,
        group_type=kind if kind in (GroupKind.CONSUMER.value, GroupKind.STREAMS.value, GroupKind.SHARE.value) else None,
    )


def _share_positions(group: GroupSnapshot, partitions: Mapping[TopicPartition, PartitionOffsets]) -> GroupSnapshot:
    """A share group with, as committed, the position its broker's lag leaves on each partition: log end - lag.
    Lag is then the broker's to the record (lagwatch's log end is read after the coordinator's, so this position
    may run a few records ahead of the queue's true one under production: rules that would read its moves as
    commits do not judge share groups). Partitions without a lag (Kafka 4.1; never fetched) have no position."""
    committed: dict[TopicPartition, CommittedOffset] = {}
    for tp, share in group.share_offsets.items():
        offsets = partitions.get(tp)
        if share.lag is not None and offsets is not None and offsets.log_end is not None:
            committed[tp] = CommittedOffset(max(0, offsets.log_end - share.lag))
    return replace(group, committed=committed)


def _unlisted_gone(group_id: str, answers: GroupAnswers) -> bool:
    """Whether a group that ListGroups did not list is gone, by its coordinator's answer: no committed offset, and
    the group unknown to it (GROUP_ID_NOT_FOUND; Kafka before 4: Dead). Otherwise it is kept: with its offsets and
    state where the coordinator gave them (the listing left it out), as unreadable where it did not (a coordinator
    moving or loading says nothing of the group), so that its alerts are held rather than resolved."""
    if answers.committed.get(group_id):
        return False
    error = answers.errors.get(group_id)
    if error is not None:
        return isinstance(error, Errors.GroupIdNotFoundError)
    described = answers.described.get(group_id)
    if described is not None and described.state == "Dead":
        return True
    if described is None:  # neither described nor refused: nothing to go on
        answers.errors[group_id] = Errors.UnknownError("not listed by ListGroups, and not described by its coordinator")
    return False


def _only_topics(group: GroupSnapshot, keep: Callable[[str], bool]) -> GroupSnapshot:
    """The group without the partitions of topics the filter leaves out: neither their commits nor the members'
    assignments of them (a partition assigned but not asked for showed as `no_commit`, its offsets unknown). The
    members' subscriptions stay: they still say which offsets Kafka keeps."""
    committed_kept = all(keep(tp.topic) for tp in group.committed)
    members_kept = all(keep(tp.topic) for m in group.members for tp in m.assignment)
    if group.share_offsets and not all(keep(tp.topic) for tp in group.share_offsets):
        group = replace(group, share_offsets={tp: s for tp, s in group.share_offsets.items() if keep(tp.topic)})
    if committed_kept and members_kept:
        return group
    committed = group.committed if committed_kept else {tp: c for tp, c in group.committed.items() if keep(tp.topic)}
    members = (
        group.members
        if members_kept
        else tuple(replace(m, assignment=tuple(tp for tp in m.assignment if keep(tp.topic))) for m in group.members)
    )
    return replace(group, committed=committed, members=members)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
