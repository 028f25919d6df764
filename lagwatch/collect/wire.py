"""The few Kafka requests a poll needs, sent through kafka-python's connection manager.

kafka-python's public helpers raise on the first group- or partition-level error and lose every other
group's answer, so lagwatch builds the requests itself: one per coordinator or per leader, all in flight at
once, every error kept beside the group or partition it belongs to. Every request sent is counted.
"""

from __future__ import annotations

import contextlib
import struct
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kafka.errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetFetchRequest, OffsetSpec
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.record import MemoryRecords

from lagwatch.collect.client import side_connection
from lagwatch.collect.describe_groups import DescribeGroupsAnswer, OwnDescribeGroupsRequest
from lagwatch.collect.group_describes import (
    DescribeAnswer,
    DescribedGroup,
    OwnConsumerGroupDescribeRequest,
    OwnDescribeShareGroupOffsetsRequest,
    OwnShareGroupDescribeRequest,
    OwnStreamsGroupDescribeRequest,
    ShareOffsetsAnswer,
    capitalised,
)
from lagwatch.collect.list_groups import OwnListGroupsRequest
from lagwatch.collect.list_groups_answer import ListedGroup, ListGroupsAnswer
from lagwatch.collect.offset_fetch import OffsetFetchV8Request
from lagwatch.collect.offset_fetch_answer import OffsetFetchAnswer
from lagwatch.model import CommittedOffset, Member, ShareOffset, TopicPartition

T = TypeVar("T")

# Group-level errors after which the group's coordinator must be looked up again.
COORDINATOR_ERRORS = (
    Errors.NotCoordinatorError,
    Errors.CoordinatorNotAvailableError,
    Errors.CoordinatorLoadInProgressError,
)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# Without OffsetFetch v8 (brokers before 3.0) each group costs one request: keep this many in flight.
LEGACY_OFFSET_FETCH_CONCURRENCY = 16
# A coordinator's DescribeShareGroupOffsets goes on a second connection (a broker answers one connection's requests
# one at a time, and every other request of the poll waited behind this one), in at most this many parts of at
# least SHARE_OFFSETS_PART_MIN groups. The broker's time grows faster than the groups asked: on Kafka 4.4.0, 100
# groups of 10 share-partitions took 28 ms, 500 took 178 ms and 1,000 took 505 ms (0.50 s of its CPU); 1,000 in 4
# parts took 0.29 s of its CPU (bench/group_kinds_bench.py, bench/README.md). A fixed number of requests, whatever
# the number of share groups.
SHARE_OFFSETS_PARTS = 4
SHARE_OFFSETS_PART_MIN = 100
# A coordinator of at least 2 x OFFSET_FETCH_PART_MIN groups is sent its OffsetFetch in parts (up to
# OFFSET_FETCH_PARTS, of at least OFFSET_FETCH_PART_MIN groups), every other one on the side connection: the broker
# works on two at once, and lagwatch decodes one answer while the broker still writes the next. On Kafka 4.4.0 with
# 100,000 groups x 10 partitions on one broker (2 cores), the groups' answers came in 1.8 s at the median as one
# request, 1.8 s in 2 parts and 1.55-1.6 s in 4 (bench/README.md). Below that, one request (10,000 groups: 0.1 s of
# the broker's time).
OFFSET_FETCH_PARTS = 4
OFFSET_FETCH_PART_MIN = 10_000


@dataclass
class GroupAnswers:
    """What the coordinators said of each group, with an error per group that could not be read."""

    described: dict[str, DescribedGroup] = field(default_factory=dict)
    committed: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    share_offsets: dict[str, dict[TopicPartition, ShareOffset]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogOffsets:
    offsets: dict[TopicPartition, int]
    errors: dict[TopicPartition, str]


class Wire:
    def __init__(self, admin: Any, request_timeout_ms: int) -> None:
        self._admin = admin
        self._manager = admin._manager
        self._timeout_ms = request_timeout_ms
        self.sent: Counter[str] = Counter()

    # -- plumbing ---------------------------------------------------------------------------------------

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Runs a coroutine on kafka-python's I/O thread and waits for it."""
        return self._manager.run(fn, *args)  # type: ignore[no-any-return]

    async def _send_all(
        self, requests: Iterable[tuple[int | None, Any]], aside: Iterable[tuple[int, Any]] = ()
    ) -> list[Any]:
        """Sends every request at once, in rounds of as many per broker as one connection takes in flight; returns
        each response, or the exception it failed with. (A connection refuses a request past its in-flight limit,
        5: a coordinator with groups of every kind is sent 6 at once, and the sixth failed the groups it held.)
        `aside`: requests sent on a second connection to their broker (side_connection), answered after the others'.
        A broker answers one connection's requests one at a time, in order: a slow answer there holds up no other."""
        requests, aside = list(requests), list(aside)
        limit = max(1, int(self._manager.config.get("max_in_flight_requests_per_connection", 5)))
        beside: list[Any] = [None] * len(aside)  # a future, or the exception the request failed with
        aside_rounds = _rounds([broker for broker, _ in aside], limit)

        def send_aside(chosen: list[int]) -> None:
            for i in chosen:
                broker, request = aside[i]
                self.sent[request.name.removesuffix("Request")] += 1
                try:
                    conn = side_connection(self._manager, broker)
                    beside[i] = conn.send_request(request, request_timeout_ms=self._timeout_ms)
                except Exception as e:  # a broker the client does not know: that request's answer
                    beside[i] = e

        if aside_rounds:  # the first round at once, beside the others
            send_aside(aside_rounds[0])
        results: list[Any] = [None] * len(requests)
        for chosen in _rounds([node_id for node_id, _ in requests], limit):
            futures: list[tuple[int, Any]] = []
            for i in chosen:
                node_id, request = requests[i]
                self.sent[request.name.removesuffix("Request")] += 1
                try:
                    futures.append(
                        (i, self._manager.send(request, node_id=node_id, request_timeout_ms=self._timeout_ms))
                    )
                except Exception as e:  # a node the client does not know (UnknownBrokerIdError): that request's answer
                    if isinstance(e, Errors.UnknownBrokerIdError):
                        self._manager.cluster.request_update()  # a broker new to its metadata: learnt by the next poll
                    futures.append((i, e))
            for i, future in futures:
                results[i] = await _answer(future)
        for k, chosen in enumerate(aside_rounds):
            if k:
                send_aside(chosen)
            for i in chosen:
                beside[i] = await _answer(beside[i])
        return results + beside

    def connections(self) -> dict[int, int]:
        """How many connections the client has made to each broker (lagwatch.collect.client counts them)."""
        return dict(getattr(self._manager, "lagwatch_connections", {}))

    def broker_ids(self) -> list[int]:
        return sorted(b.node_id for b in self._manager.cluster.brokers())

    def api_version(self, request_cls: Any) -> int:
        return int(self._manager.broker_version_data.api_version(request_cls))

    def supports(self, request_cls: Any, version: int = 0) -> bool:
        """Whether the brokers (the version data kafka-python negotiated) answer `request_cls` at `version` or
        later."""
        try:
            return self.api_version(request_cls) >= version
        except Exception:  # an API the brokers do not have (IncompatibleBrokerVersion)
            return False

    # -- groups -------------------------------------------------------------------------------------------

    async def list_groups(self, broker_ids: list[int]) -> tuple[list[ListedGroup], dict[int, BaseException]]:
        request = OwnListGroupsRequest()
        responses = await self._send_all((b, request) for b in broker_ids)
        groups: list[ListedGroup] = []
        failed: dict[int, BaseException] = {}
        for broker_id, response in zip(broker_ids, responses, strict=True):
            if isinstance(response, BaseException):
                failed[broker_id] = response
                continue
            error = Errors.for_code(response.error_code)
            if error is not Errors.NoError:
                failed[broker_id] = error()
                continue
            if isinstance(response, ListGroupsAnswer):  # v3-5, decoded by lagwatch straight into its records
                groups += response.groups
                continue
            for g in response.groups:
                groups.append(
                    ListedGroup(
                        group_id=g.group_id,
                        protocol_type=g.protocol_type or "",
                        state=getattr(g, "group_state", None) or None,
                        group_type=getattr(g, "group_type", None) or None,
                    )
                )
        return groups, failed

    async def find_coordinators(self, group_ids: list[str]) -> tuple[dict[str, int], dict[str, BaseException]]:
        found: dict[str, int] = {}
        failed: dict[str, BaseException] = {}
        if not group_ids:
            return found, failed
        cluster = self._manager.cluster
        if self.api_version(FindCoordinatorRequest) >= 4:
            batch = [(None, FindCoordinatorRequest(key_type=0, coordinator_keys=group_ids, min_version=4))]
            (response,) = await self._send_all(batch)
            if isinstance(response, BaseException):
                return found, dict.fromkeys(group_ids, response)
            for c in response.coordinators:
                error = Errors.for_code(c.error_code)
                if error is Errors.NoError:
                    found[c.key] = cluster.add_coordinator(c, 0, c.key, synthesize_node_id=False)
                else:
                    failed[c.key] = error(c.error_message or "")
            return found, failed
        # Brokers before 2.8 answer one key per request.
        requests = [(None, FindCoordinatorRequest(key=g, key_type=0, max_version=3)) for g in group_ids]
        for group_id, response in zip(group_ids, await self._send_all(requests), strict=True):
            if isinstance(response, BaseException):
                failed[group_id] = response
            elif Errors.for_code(response.error_code) is not Errors.NoError:
                failed[group_id] = Errors.for_code(response.error_code)()
            else:
                found[group_id] = cluster.add_coordinator(response, 0, group_id, synthesize_node_id=False)
        return found, failed

    async def read_groups(
        self, by_coordinator: Mapping[int, list[str]], modern: Mapping[str, str], answers: GroupAnswers
    ) -> None:
        """Per coordinator: one DescribeGroups (classic groups), one ConsumerGroupDescribe (KIP-848 groups) and one
        StreamsGroupDescribe (KIP-1071 groups), which DescribeGroups does not know ("not a classic group": every
        streams group was unreadable, its rules frozen), and one OffsetFetch for all of them but share groups (in
        parts from 2 x OFFSET_FETCH_PART_MIN groups, every other one on the side connection);
        one ShareGroupDescribe and one DescribeShareGroupOffsets (every share-partition of each group: topics
        null, as Kafka's own tool asks) for the share groups, which commit no offset. `modern`: the group type
        (consumer, streams, share) of each group DescribeGroups does not describe."""
        requests: list[tuple[int, Any]] = []
        handlers: list[Callable[[Any], None]] = []
        aside: list[tuple[int, Any]] = []
        aside_handlers: list[Callable[[Any], None]] = []
        own_describe = self.api_version(DescribeGroupsRequest) >= 5  # answers lagwatch decodes itself
        for coordinator, group_ids in by_coordinator.items():
            classic = [g for g in group_ids if g not in modern]
            kip848 = [g for g in group_ids if modern.get(g) == "consumer"]
            applications = [g for g in group_ids if modern.get(g) == "streams"]
            queues = [g for g in group_ids if modern.get(g) == "share"]
            if queues:
                group_ids = [g for g in group_ids if modern.get(g) != "share"]
                requests.append((coordinator, OwnShareGroupDescribeRequest(group_ids=queues)))
                handlers.append(_describe_handler(queues, answers, _share_group))
                # On a connection of its own, and in a few parts: see SHARE_OFFSETS_PARTS.
                for part in _parts(queues, SHARE_OFFSETS_PARTS, SHARE_OFFSETS_PART_MIN):
                    aside.append((coordinator, OwnDescribeShareGroupOffsetsRequest(part)))
                    aside_handlers.append(_share_offsets_handler(part, answers))
            if applications:
                requests.append((coordinator, OwnStreamsGroupDescribeRequest(group_ids=applications)))
                handlers.append(_describe_handler(applications, answers, _streams_group))
            if classic:
                describe = OwnDescribeGroupsRequest(classic) if own_describe else DescribeGroupsRequest(groups=classic)
                requests.append((coordinator, describe))
                handlers.append(_describe_handler(classic, answers, _classic_group))
            if kip848:
                requests.append((coordinator, OwnConsumerGroupDescribeRequest(group_ids=kip848)))
                handlers.append(_describe_handler(kip848, answers, _kip848_group))
            if group_ids and self.api_version(OffsetFetchRequest) >= 8:
                # A coordinator of many groups: in parts, every other one on the side connection (OFFSET_FETCH_PARTS).
                for k, part in enumerate(_parts(group_ids, OFFSET_FETCH_PARTS, OFFSET_FETCH_PART_MIN)):
                    (aside if k % 2 else requests).append((coordinator, OffsetFetchV8Request(part)))
                    (aside_handlers if k % 2 else handlers).append(_offset_fetch_handler(part, answers))
            elif group_ids:  # before Kafka 3.0: one request per group (LEGACY_OFFSET_FETCH_CONCURRENCY)
                for g in group_ids:
                    requests.append(
                        (coordinator, OffsetFetchRequest(group_id=g, topics=None, min_version=2, max_version=7))
                    )
                    handlers.append(_offset_fetch_handler([g], answers))
        if self.api_version(OffsetFetchRequest) >= 8:
            responses = await self._send_all(requests, aside)
        else:  # (no share groups before 3.0)
            responses = []
            for start in range(0, len(requests), LEGACY_OFFSET_FETCH_CONCURRENCY):
                responses += await self._send_all(requests[start : start + LEGACY_OFFSET_FETCH_CONCURRENCY])
            responses += await self._send_all((), aside)
        for handle, response in zip(handlers + aside_handlers, responses, strict=True):
            handle(response)

    # -- partitions ----------------------------------------------------------------------------------------

    async def partition_leaders(self, topics: list[str]) -> tuple[dict[TopicPartition, int], dict[str, str]]:
        """Leader of every partition of `topics`, from one Metadata request; unknown topics in the second map."""
        if not topics:
            return {}, {}
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        (response,) = await self._send_all([(None, request)])
        if isinstance(response, BaseException):
            raise response
        if {b.node_id for b in response.brokers} != {b.node_id for b in self._manager.cluster.brokers()}:
            # A broker joined or came back (or left): the client's own metadata, which says where ListGroups and
            # the coordinators' requests go, would learn it only at its next refresh, up to 5 minutes on (a
            # broker restarted was asked nothing meanwhile: its new groups unseen, its coordinators unknown).
            with contextlib.suppress(Exception):  # one more Metadata request, only then; a failure changes nothing
                self.sent["Metadata"] += 1
                await self._manager.cluster.refresh_metadata()
        leaders: dict[TopicPartition, int] = {}
        topic_errors: dict[str, str] = {}
        for t in response.topics:
            error = Errors.for_code(t.error_code)
            if error is not Errors.NoError:
                topic_errors[t.name] = error.__name__
                continue
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition_index)] = p.leader_id
        return leaders, topic_errors

    async def list_offsets(
        self, leaders: Mapping[TopicPartition, int], specs: list[tuple[OffsetSpec, int]]
    ) -> list[LogOffsets]:
        """For each (spec, isolation level): one ListOffsets per leader, all in flight together."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, leader in leaders.items():
            by_leader.setdefault(leader, []).append(tp)
        requests: list[tuple[int, Any]] = []
        for spec, isolation in specs:
            for leader, tps in by_leader.items():
                requests.append((leader, _list_offsets_request(tps, spec, isolation)))
        responses = iter(await self._send_all(requests))
        results = []
        for _spec in specs:
            offsets: dict[TopicPartition, int] = {}
            errors: dict[TopicPartition, str] = {}
            for tps in by_leader.values():
                _read_list_offsets(next(responses), tps, offsets, errors)
            results.append(LogOffsets(offsets, errors))
        return results

    async def record_times(
        self, leaders: Mapping[TopicPartition, int], wanted: Mapping[TopicPartition, list[int]]
    ) -> dict[tuple[TopicPartition, int], float]:
        """When the record at each wanted offset was written: one small Fetch per leader per round (a partition
        appears once per request, so a partition wanted at two offsets takes two rounds)."""
        times: dict[tuple[TopicPartition, int], float] = {}
        rounds = max((len(offsets) for offsets in wanted.values()), default=0)
        for i in range(rounds):
            by_leader: dict[int, list[tuple[TopicPartition, int]]] = {}
            for tp, offsets in wanted.items():
                if i < len(offsets) and tp in leaders:
                    by_leader.setdefault(leaders[tp], []).append((tp, offsets[i]))
            requests = [(leader, _fetch_request(items)) for leader, items in by_leader.items()]
            for (_, items), response in zip(by_leader.items(), await self._send_all(requests), strict=True):
                if not isinstance(response, BaseException):
                    _read_record_times(response, dict(items), times)
        return times

    async def control_tails(
        self, leaders: Mapping[TopicPartition, int], wanted: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, int | None]:
        """For each wanted partition (offset, log end): where the run of control records (transaction markers)
        that ends the log begins (None: a data record comes last). One Fetch per leader. Only definite answers:
        a partition whose batches could not all be read (an error, a leader unknown, the answer cut short) is
        left out, to be asked again."""
        by_leader: dict[int, list[tuple[TopicPartition, int]]] = {}
        for tp, (offset, _) in wanted.items():
            if tp in leaders:
                by_leader.setdefault(leaders[tp], []).append((tp, offset))
        requests = [
            (leader, _fetch_request(items, TAIL_BYTES, min(len(items) * TAIL_BYTES, TAIL_REQUEST_BYTES)))
            for leader, items in by_leader.items()
        ]
        tails: dict[TopicPartition, int | None] = {}
        for response in await self._send_all(requests):
            if not isinstance(response, BaseException):
                _read_control_tails(response, wanted, tails)
        return tails

    # -- broker settings -----------------------------------------------------------------------------------

    def broker_configs(self, broker_ids: list[int], names: list[str]) -> dict[int, dict[str, str]]:
        """The named settings of every broker, as each broker really runs them (config_filter='all')."""
        resources = [
            ConfigResource(ConfigResourceType.BROKER, str(b), configs=dict.fromkeys(names)) for b in broker_ids
        ]
        self.sent["DescribeConfigs"] += len(broker_ids)
        described = self._admin.describe_configs(resources, config_filter="all")
        result: dict[int, dict[str, str]] = {}
        for broker, configs in described.get("broker", {}).items():
            result[int(broker)] = {name: c.get("value") for name, c in configs.items() if c.get("value") is not None}
        return result


def _fetch_request(
    items: list[tuple[TopicPartition, int]], partition_bytes: int = 1024, total_bytes: int = 1 << 20
) -> Any:
    topic_cls = FetchRequest.FetchTopic
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in items:
        # A small limit: the broker still returns the whole first batch, which holds the record wanted.
        by_topic.setdefault(tp.topic, []).append(
            topic_cls.FetchPartition(partition=tp.partition, fetch_offset=offset, partition_max_bytes=partition_bytes)
        )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=total_bytes,
        isolation_level=READ_UNCOMMITTED,
        topics=[topic_cls(topic=t, partitions=ps) for t, ps in by_topic.items()],
        max_version=12,  # v13+ name topics by id
    )


def _read_record_times(
    response: Any, wanted: dict[TopicPartition, int], times: dict[tuple[TopicPartition, int], float]
) -> None:
    for t in response.responses:
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition_index)
            offset = wanted.get(tp)
            if offset is None or p.error_code != 0 or not p.records:
                continue
            try:
                records = MemoryRecords(bytes(p.records))
                while (batch := records.next_batch()) is not None:
                    record = next((r for r in batch if r.offset >= offset), None)
                    if record is not None:
                        if record.timestamp is not None and record.timestamp >= 0:
                            times[(tp, offset)] = record.timestamp / 1000.0
                        break
            except Exception:
                continue  # a compression codec not installed, or a batch cut short: interpolation stays


TAIL_BYTES = 4096  # a transaction marker's batch is about 80 bytes: a tail of 16 of them fits three times over
TAIL_REQUEST_BYTES = 16 << 20  # partitions past it in one answer are left out, and asked again at the next poll


def _read_control_tails(
    response: Any, wanted: Mapping[TopicPartition, tuple[int, int]], tails: dict[TopicPartition, int | None]
) -> None:
    for t in response.responses:
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition_index)
            if tp not in wanted or p.error_code != 0 or not p.records:
                continue
            offset, log_end = wanted[tp]
            begins, reached = offset, offset  # after the last data record seen; how far the batches read go
            try:
                records = MemoryRecords(bytes(p.records))
                while (batch := records.next_batch()) is not None:
                    reached = max(reached, batch.next_offset)
                    if batch.next_offset > offset and not getattr(batch, "is_control_batch", False):
                        begins = max(begins, batch.next_offset)  # a data batch: its records can be consumed
            except Exception:
                continue  # a batch cut short or a codec not installed: not known, nothing claimed
            if reached >= log_end:  # every batch up to the log end was read: a definite answer
                tails[tp] = begins if begins < log_end else None


def _list_offsets_request(tps: list[TopicPartition], spec: OffsetSpec, isolation: int) -> Any:
    by_topic: dict[str, list[Any]] = {}
    partition_cls = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(partition_cls(partition_index=tp.partition, timestamp=spec))
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        min_version=max(ListOffsetsRequest.min_version_for_isolation_level(isolation), 1),
    )


def _read_list_offsets(
    response: Any,
    tps: list[TopicPartition],
    offsets: dict[TopicPartition, int],
    errors: dict[TopicPartition, str],
) -> None:
    if isinstance(response, BaseException):
        for tp in tps:
            errors[tp] = error_text(response)
        return
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            error = Errors.for_code(p.error_code)
            if error is Errors.NoError and p.offset >= 0:
                offsets[tp] = p.offset
            else:
                errors[tp] = error.__name__ if error is not Errors.NoError else "no offset"


def _describe_handler(
    group_ids: list[str], answers: GroupAnswers, describe: Callable[[Any], DescribedGroup]
) -> Callable[[Any], None]:
    """Reads a DescribeGroups or ConsumerGroupDescribe answer, keeping each group's error beside it."""

    def handle(response: Any) -> None:
        if isinstance(response, BaseException):
            for g in group_ids:
                answers.errors.setdefault(g, response)
            return
        if isinstance(response, DescribeGroupsAnswer):  # v5-6, decoded by lagwatch
            _take_described(response, answers)
            return
        if isinstance(response, DescribeAnswer):  # KIP-848, streams and share groups, decoded by lagwatch
            for group_id, error_code, error_message, described in response.groups:
                if described is None:
                    answers.errors.setdefault(group_id, Errors.for_code(error_code)(error_message or ""))
                else:
                    answers.described[group_id] = described
            return
        for g in response.groups:
            error = Errors.for_code(g.error_code)
            if error is not Errors.NoError:
                answers.errors.setdefault(g.group_id, error(getattr(g, "error_message", None) or ""))
            else:
                answers.described[g.group_id] = describe(g)

    return handle


def _classic_group(g: Any) -> DescribedGroup:
    return DescribedGroup(
        state=g.group_state,
        protocol_type=g.protocol_type or "",
        members=tuple([_member(m, g.protocol_type) for m in g.members]) if g.members else (),
    )


def _take_described(response: DescribeGroupsAnswer, answers: GroupAnswers) -> None:
    # Groups without members (nearly all at scale: Empty groups) share one record per state and protocol type.
    memberless: dict[tuple[str, str], DescribedGroup] = {}
    for g in response.groups:
        if g.error_code:
            answers.errors.setdefault(g.group_id, Errors.for_code(g.error_code)(g.error_message or ""))
        elif g.members:
            members = tuple([_member(m, g.protocol_type) for m in g.members])
            answers.described[g.group_id] = DescribedGroup(g.state, g.protocol_type, members)
        else:
            described = memberless.get((g.state, g.protocol_type))
            if described is None:
                described = memberless[(g.state, g.protocol_type)] = DescribedGroup(g.state, g.protocol_type, ())
            answers.described[g.group_id] = described


def _modern_member(
    m: Any, assignment: tuple[TopicPartition, ...], subscribed: tuple[str, ...], regex: str | None = None
) -> Member:
    """A member of a KIP-848 or streams group, as their describe answers give it (the id is a string)."""
    return Member(
        member_id=str(m.member_id),
        client_id=m.client_id,
        client_host=m.client_host,
        assignment=assignment,
        subscribed_topics=subscribed,
        subscribed_regex=regex,
    )


def _kip848_group(g: Any) -> DescribedGroup:
    members = tuple(
        _modern_member(
            m,
            tuple(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
            tuple(m.subscribed_topic_names),
            m.subscribed_topic_regex or None,
        )
        for m in g.members
    )
    return DescribedGroup(state=capitalised(g.group_state), protocol_type="consumer", members=members)


def _streams_group(g: Any) -> DescribedGroup:
    """A KIP-1071 group: each member's active tasks (sub-topology, partitions) read as the partitions of the
    sub-topology's source topics it consumes (repartition topics included), as Kafka Streams assigns them."""
    subtopologies = (g.topology.subtopologies or ()) if g.topology is not None else ()
    sources: dict[str, tuple[str, ...]] = {
        s.subtopology_id: (*s.source_topics, *(t.name for t in s.repartition_source_topics)) for s in subtopologies
    }
    subscribed = tuple(sorted({t for topics in sources.values() for t in topics}))
    members = tuple(
        _modern_member(
            m,
            tuple(
                TopicPartition(topic, p)
                for task in m.assignment.active_tasks
                for topic in sources.get(task.subtopology_id, ())
                for p in task.partitions
            ),
            subscribed,
        )
        for m in g.members
    )
    return DescribedGroup(state=capitalised(g.group_state), protocol_type="streams", members=members)


def _share_group(g: Any) -> DescribedGroup:
    """A KIP-932 share group: its members' assignments are share-partitions (several members may share one)."""
    members = tuple(
        _modern_member(
            m,
            tuple(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
            tuple(m.subscribed_topic_names),
        )
        for m in g.members
    )
    return DescribedGroup(state=capitalised(g.group_state), protocol_type="share", members=members)


def _rounds(node_ids: list[int | None], limit: int) -> list[list[int]]:
    """The requests' indices in rounds of at most `limit` per broker (None: one round, whatever the number)."""
    rounds: list[list[int]] = []
    sent_to: Counter[int | None] = Counter()
    for i, node_id in enumerate(node_ids):
        k = sent_to[node_id] // limit if node_id is not None else 0
        sent_to[node_id] += 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(i)
    return rounds


async def _answer(future: Any) -> Any:
    """A request's answer, or the exception it failed with: one broker's failure stays with its own request."""
    if isinstance(future, Exception):
        return future
    try:
        return await future
    except Exception as e:
        return e


def _parts(items: list[str], most: int, least: int) -> list[list[str]]:
    """`items` in at most `most` parts of nearly equal size, none under `least` (but one)."""
    count = max(1, min(most, len(items) // least))
    size = max(1, -(-len(items) // count))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _share_offsets_handler(group_ids: list[str], answers: GroupAnswers) -> Callable[[Any], None]:
    """Reads a DescribeShareGroupOffsets answer: each share-partition's start offset and (v1, Kafka 4.2+) lag, -1
    read as "not known" (a partition no consumer fetched from yet; any lag in a v0 answer), as Kafka's tool shows
    "-". A partition-level error leaves the partition out."""

    def handle(response: Any) -> None:
        if isinstance(response, BaseException):
            for g in group_ids:
                answers.errors.setdefault(g, response)
            return
        if isinstance(response, ShareOffsetsAnswer):  # v0-1, decoded by lagwatch
            for group_id, error_code, error_message, found in response.groups:
                if error_code:
                    answers.errors.setdefault(group_id, Errors.for_code(error_code)(error_message or ""))
                else:
                    answers.share_offsets[group_id] = found
            return
        for g in response.groups:
            error = Errors.for_code(g.error_code)
            if error is not Errors.NoError:
                answers.errors.setdefault(g.group_id, error(g.error_message or ""))
                continue
            offsets: dict[TopicPartition, ShareOffset] = {}
            for t in g.topics or ():
                for p in t.partitions:
                    if p.error_code:
                        continue
                    start = p.start_offset if p.start_offset >= 0 else None
                    lag = getattr(p, "lag", -1)
                    offsets[TopicPartition(t.topic_name, p.partition_index)] = ShareOffset(
                        start, lag if start is not None and lag is not None and lag >= 0 else None
                    )
            answers.share_offsets[g.group_id] = offsets

    return handle


def _member(m: Any, protocol_type: str) -> Member:
    assignment: tuple[TopicPartition, ...] = ()
    subscribed: tuple[str, ...] = ()
    if protocol_type == "consumer":  # only consumer-protocol members carry assignments lagwatch can read
        try:
            if m.member_assignment:
                decoded = ConsumerProtocolAssignment.decode(m.member_assignment)
                assignment = tuple(
                    TopicPartition(a.topic, p) for a in decoded.assigned_partitions for p in a.partitions
                )
            if m.member_metadata:
                subscribed = tuple(ConsumerProtocolSubscription.decode(m.member_metadata).topics)
        except (struct.error, ValueError):
            pass  # a client writing something else: the member stays, without assignment
    return Member(
        member_id=m.member_id,
        client_id=m.client_id,
        client_host=m.client_host,
        assignment=assignment,
        subscribed_topics=subscribed,
    )


def _offset_fetch_handler(group_ids: list[str], answers: GroupAnswers) -> Callable[[Any], None]:
    def handle(response: Any) -> None:
        if isinstance(response, BaseException):
            for g in group_ids:
                answers.errors.setdefault(g, response)
            return
        if isinstance(response, OffsetFetchAnswer):  # v8, decoded by lagwatch straight into its records
            _take_decoded(response, answers)
            return
        top_error = Errors.for_code(getattr(response, "error_code", 0))
        if response.API_VERSION >= 8:
            groups = [(g.group_id, g.error_code, g.topics) for g in response.groups]
        else:
            groups = [(group_ids[0], response.error_code, response.topics)]
        for group_id, error_code, topics in groups:
            error = Errors.for_code(error_code)
            if error is Errors.NoError and top_error is not Errors.NoError:
                error = top_error
            if error is not Errors.NoError:
                answers.errors.setdefault(group_id, error())
                continue
            committed: dict[TopicPartition, CommittedOffset] = {}
            for t in topics:
                for p in t.partitions:
                    # -1 means "nothing committed"; a partition-level error leaves the partition out.
                    if p.error_code == 0 and p.committed_offset >= 0:
                        epoch = getattr(p, "committed_leader_epoch", -1)
                        committed[TopicPartition(t.name, p.partition_index)] = CommittedOffset(
                            offset=p.committed_offset,
                            leader_epoch=epoch if epoch is not None and epoch >= 0 else None,
                            metadata=p.metadata or "",
                        )
            answers.committed[group_id] = committed

    return handle


def _take_decoded(response: OffsetFetchAnswer, answers: GroupAnswers) -> None:
    for group_id, error_code, committed in response.groups:
        error = Errors.for_code(error_code)
        if error is Errors.NoError:
            answers.committed[group_id] = committed
        else:
            answers.errors.setdefault(group_id, error())


def error_text(error: BaseException) -> str:
    """One line: the error's class and the first line of its message."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
