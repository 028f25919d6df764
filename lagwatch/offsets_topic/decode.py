"""Placeholder types until the decoder lands (replaced by the real decoder)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None
    value_version: int


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    group: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int | None
    members: tuple[GroupMember, ...]
    value_version: int

    @property
    def state_is_empty(self) -> bool:
        return not self.members


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    group: str


@dataclass(frozen=True, slots=True)
class OtherRecord:
    key_version: int


@dataclass(frozen=True, slots=True)
class Undecodable:
    reason: str
    key_version: int | None
    value_version: int | None


Record = OffsetCommit | OffsetTombstone | GroupMetadata | GroupTombstone | OtherRecord | Undecodable


def decode_record(key: bytes | None, value: bytes | None) -> Record:
    raise NotImplementedError
