"""Plain, immutable data that every stage shares. No Kafka client objects ever cross a stage boundary."""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from lagwatch.matchers import full_match


class Severity(StrEnum):
    """How bad a finding is; an alert's severity may change while it fires (escalated or eased)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK: dict[str, int] = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
# A severity from its text or itself, in one dict access (a Severity hashes as its text): Enum's call costs 10x
# more, and the alert book takes one per finding at every poll.
SEVERITY_OF: Mapping[str, Severity] = MappingProxyType({s.value: s for s in Severity})


# A severity's rank, from its text or itself (a C call: the storm pass asks it of every group at every poll).
severity_rank: Callable[[str], int] = _SEVERITY_RANK.__getitem__


def worst(severities: Iterable[Severity]) -> Severity | None:
    """The highest of `severities`, None if there is none."""
    return max(severities, key=_SEVERITY_RANK.__getitem__, default=None)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class GroupKind(StrEnum):
    """How a group manages membership; it decides when its committed offsets can expire."""

    CLASSIC = "classic"  # subscribe() through the classic rebalance protocol, protocol type "consumer"
    SIMPLE = "simple"  # assign() + commit: no members, protocol type ""
    CONSUMER = "consumer"  # KIP-848 group (group.protocol=consumer)
    STREAMS = "streams"  # KIP-1071 group (Kafka Streams, group.protocol=streams; Kafka 4.2+)
    SHARE = "share"  # KIP-932 share group (a queue: records acquired and acknowledged one by one; Kafka 4.1+)
    OTHER = "other"  # another protocol on the classic coordinator, e.g. Kafka Connect
    CHECKPOINT = "checkpoint"  # a Spark Structured Streaming query: offsets in its checkpoint, never in Kafka
    UNKNOWN = "unknown"  # the broker did not say (error, or too old to tell)


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...] = ()
    subscribed_topics: tuple[str, ...] = ()
    # A KIP-848 member's server-side subscription (SubscriptionPattern, RE2J syntax): the broker subscribes it to
    # every topic the pattern matches whole, and no topic name of them is listed.
    subscribed_regex: str | None = None


class CommittedOffset(NamedTuple):
    """A NamedTuple (immutable, typed) rather than a frozen dataclass, which takes 2.7x as long to build: one per
    group-partition at every poll."""

    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


class ShareOffset(NamedTuple):
    """A share-partition as its group coordinator describes it (DescribeShareGroupOffsets), as Kafka's
    `kafka-share-groups --describe --offsets` shows it: START-OFFSET and LAG, None where it shows "-".

    The start offset (SPSO) is the first record not yet delivered to completion; it is no measure of progress (it
    stayed 0 while 400 records after it were accepted). The lag is the broker's (KIP-1226, Kafka 4.2+): records
    not delivered to completion (available, acquired and not acknowledged, released), None before 4.2 and for a
    partition no consumer has fetched from yet."""

    start_offset: int | None
    lag: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Where a partition's log starts and ends; None where the broker did not tell."""

    log_start: int | None
    log_end: int | None
    last_stable: int | None = None
    error: str | None = None
    # Where the control records (transaction markers) that end the log begin, when the poll looked (a consumer
    # committed there, at most a few records below the log end of an idle partition): a consumer committed at or
    # past it has nothing left to consume, though the log end is above its offset. None: not looked, or no such
    # records at the end.
    consumable_end: int | None = None


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    group_id: str
    state: str  # as the broker names it: Stable, Empty, PreparingRebalance, Dead, ... or "Unknown"
    protocol_type: str
    kind: GroupKind
    coordinator_id: int | None
    members: tuple[Member, ...] = ()
    # A share group's `committed` holds, per partition where the broker gives its lag, the position that lag
    # leaves: log end - lag, the records delivered to completion as if in order. Lag, history and rules then read
    # a queue as they read a consumer group; `share_offsets` is what its coordinator said.
    committed: Mapping[TopicPartition, CommittedOffset] = field(default_factory=dict)
    error: str | None = None  # set when this group could not be read this poll; the others are unaffected
    share_offsets: Mapping[TopicPartition, ShareOffset] = field(default_factory=dict)

    def member_of(self) -> dict[TopicPartition, Member]:
        return {tp: m for m in self.members for tp in m.assignment}

    def unsubscribed(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Those of `tps` on a topic no member subscribes to, by name or by regex (a KIP-848 member's pattern,
        matched whole as the broker matches it), nor is assigned. Kafka expires no offset of the others while the
        group has members. The members are looked at only if some topic is not named in a subscription."""
        named = {t for m in self.members for t in m.subscribed_topics}
        left = [tp for tp in tps if tp.topic not in named]
        if not left:
            return left
        assigned = {tp.topic for m in self.members for tp in m.assignment}
        left = [tp for tp in left if tp.topic not in assigned]
        patterns = {m.subscribed_regex for m in self.members if m.subscribed_regex}
        if not left or not patterns:
            return left
        return [tp for tp in left if not any(_subscribes(p, tp.topic) for p in patterns)]


def _subscribes(pattern: str, topic: str) -> bool:
    """Whether a KIP-848 subscription pattern takes `topic` (the broker's RE2J `matcher(topic).matches()`). A
    pattern RE2 does not take (RE2J's syntax is RE2's, nearly) counts as taking it: lagwatch cannot tell, and an
    offset wrongly thought unsubscribed is warned as expiring, a false page."""
    try:
        return full_match(pattern, topic)
    except ValueError:
        return True


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    broker_id: int
    offsets_retention_minutes: int | None
    offsets_retention_check_interval_ms: int | None


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One poll of one cluster. `error` is set when the cluster as a whole could not be polled."""

    cluster: str
    taken_at: float  # seconds since the epoch, when the poll began
    duration_s: float
    groups: tuple[GroupSnapshot, ...] = ()
    partitions: Mapping[TopicPartition, PartitionOffsets] = field(default_factory=dict)
    brokers: tuple[BrokerSettings, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)  # Kafka requests sent, by API name
    # Exact mode: when the record at (partition, committed offset) was written, seconds since the epoch.
    record_times: Mapping[tuple[TopicPartition, int], float] = field(default_factory=dict)
    # Topics the previous poll saw that no longer exist: their committed offsets were deleted with them.
    missing_topics: frozenset[str] = frozenset()
    # Groups the filter takes that lagwatch cannot watch on this cluster, by group type (share groups where the
    # brokers lack their APIs): said, never silent.
    unwatched_groups: Mapping[str, int] = field(default_factory=dict)
    # What lagwatch cannot see on this cluster, and why, by a short name (share_lag: brokers before Kafka 4.2 do
    # not report share groups' lag): said once, in the log, /api/v1/clusters and lagwatch_blind_spot.
    blind_spots: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    error_kind: str | None = None  # unreachable | auth_failed | timeout | error

    @property
    def ok(self) -> bool:
        return self.error is None


_NO_DETAILS: Mapping[str, object] = MappingProxyType({})


class _FindingFields(NamedTuple):
    rule: str
    severity: Severity
    cluster: str
    group: str | None  # None: about the cluster as a whole
    labels: Mapping[str, str]  # cluster, group, topic, plus routing labels (team, slack_channel, ...)
    summary: str
    details: Mapping[str, object] = _NO_DETAILS  # JSON-able figures for notifiers and the API
    for_s: float = 0.0
    runbook_url: str | None = None
    # alert_key(rule, labels), built once (the alert book reads it several times). Given only by GroupContext,
    # which builds each topic's labels and key suffix once for all its rules; anyone else leaves it out.
    key: str = ""
    keep_firing_for_s: float = 0.0  # the rule's keep_firing_for_s: how long the alert stays firing once not found


class Finding(_FindingFields):
    """One problem a rule sees in one poll. Findings with the same key across polls are the same alert.

    A NamedTuple (immutable, typed) rather than a frozen dataclass, whose __init__ sets each of its ten fields
    through object.__setattr__: two findings per lagging group at every poll (3.6% of a step at 100k
    group-partitions, py-spy)."""

    __slots__ = ()

    def __new__(
        cls,
        rule: str,
        severity: Severity,
        cluster: str,
        group: str | None,
        labels: Mapping[str, str],
        summary: str,
        details: Mapping[str, object] = _NO_DETAILS,
        for_s: float = 0.0,
        runbook_url: str | None = None,
        key: str = "",
        keep_firing_for_s: float = 0.0,
    ) -> Finding:
        fields = (rule, severity, cluster, group, labels, summary, details, for_s, runbook_url)
        return tuple.__new__(cls, (*fields, key or alert_key(rule, labels), keep_firing_for_s))


def alert_key(rule: str, labels: Mapping[str, str]) -> str:
    """Identity of an alert across polls. Severity is not part of it: a warning that becomes critical is the same
    alert, escalated. Injective: `|`, `=` and `\\` in names and values are escaped (a group id may hold them), so
    two label sets never share a key (and an alert); keys of values without them read as before."""
    return rule + "|" + "|".join([f"{key_part(k)}={key_part(v)}" for k, v in sorted(labels.items())])


def key_part(text: str) -> str:
    """A label name or value as written in an alert or group key."""
    if "|" in text or "=" in text or "\\" in text:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("=", "\\=")
    return text


_Row = TypeVar("_Row")


def from_row(cls: type[_Row], row: Any) -> _Row:
    """A dataclass made from a saved row (a dict of plain JSON values), every field of the type its annotation
    says: a row of another shape (a hand edit, a damaged file: `labels` a list, `attempts` text) raises TypeError
    here, where its loader sets it aside, instead of failing later at every poll or in a notifier's worker."""
    if not isinstance(row, dict):
        raise TypeError(f"a {type(row).__name__}, not an object")
    hints = _hints(cls)  # type: ignore[arg-type]  # a class is hashable
    row = {name: _enum_of(value, hints.get(name)) for name, value in row.items()}
    made = cls(**row)
    for name, hint in hints.items():
        value = getattr(made, name)
        if not _of_type(value, hint):
            raise TypeError(f"{name} is a {type(value).__name__} ({str(value)[:40]!r}), not {hint}")
    return made


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _enum_of(value: Any, hint: Any) -> Any:
    """A saved string as the enum its field is typed with (`Severity`, `AlertState`...); ValueError if it is none
    of its members. Other values as they are."""
    if not isinstance(value, str) or hint is None:
        return value
    for kind in (hint, *typing.get_args(hint)):
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return kind(value)
    return value


def _of_type(value: Any, hint: Any) -> bool:
    """A coarse check of a JSON value against a type annotation (unions, None, str, numbers, dicts, lists)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_of_type(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint)
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin in (dict, Mapping):  # a read-only mapping in memory (an alert's labels, details) is a dict saved
        return isinstance(value, dict) and all(_of_type(k, args[0]) and _of_type(v, args[1]) for k, v in value.items())
    if origin in (list, tuple):
        element = args[0] if args else Any
        return isinstance(value, list | tuple) and all(_of_type(v, element) for v in value)
    return True  # another class (a nested dataclass): its own loader checks it
