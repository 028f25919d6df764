"""What the Spark executors run for the offsets-topic job: Arrow batches of `__consumer_offsets` records (as Spark's
Kafka source gives them) in, one decoded row per record out, through the same core decoder the daemon uses.

Executors import this module, so it imports only the core decoder, the standard library and pyarrow: no
kafka-python, no Slack, no pyspark (tests/test_pipeline_offsets_topic.py checks this). pyarrow is imported when the
first batch is decoded, not with the module: the CLI imports it to build its parser, also in the daemon's image,
which has no pyarrow.

Control records of transactions (commit and abort markers) are never decoded: Kafka's Java consumer, which Spark's
connector runs, drops control batches itself, and should one come through anyway its key (int16 version 0, then
int16 type 0 abort or 1 commit: 4 bytes, shorter than any offset commit key) is recognised and counted as
`control`, never as undecodable.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lagwatch.offsets_topic import (
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    OtherRecord,
    Undecodable,
    decode_record,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Kinds of decoded rows (the `kind` column).
OFFSET_COMMIT = "offset_commit"
OFFSET_TOMBSTONE = "offset_tombstone"
GROUP_METADATA = "group_metadata"
GROUP_TOMBSTONE = "group_tombstone"
OTHER = "other"  # KIP-848 consumer group, share and streams group records (key types 3+): group and type only
UNDECODABLE = "undecodable"
CONTROL = "control"  # a transaction marker, should the connector pass one through
KINDS = (OFFSET_COMMIT, OFFSET_TOMBSTONE, GROUP_METADATA, GROUP_TOMBSTONE, OTHER, UNDECODABLE, CONTROL)

MEMBER_DDL = (
    "struct<member_id:string,group_instance_id:string,client_id:string,client_host:string,"
    "subscribed_topics:array<string>>"
)
# The decoded rows, as Spark DDL (the Arrow schema below must match it column for column).
DECODED_DDL = ", ".join(
    [
        "kind string",
        "source_partition int",
        "source_offset bigint",
        "source_timestamp timestamp",
        "key_version int",
        "value_version int",
        "tombstone boolean",
        "`group` string",
        "topic string",
        "`partition` int",
        "`offset` bigint",
        "leader_epoch int",
        "metadata string",
        "commit_timestamp timestamp",
        "expire_timestamp timestamp",
        "protocol_type string",
        "generation int",
        "protocol string",
        "leader string",
        "state_timestamp timestamp",
        f"members array<{MEMBER_DDL}>",
        "reason string",
    ]
)


@functools.cache
def arrow_schema() -> pa.Schema:
    """The decoded rows as Arrow, column for column DECODED_DDL."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    member = pa.struct(
        [
            ("member_id", pa.string()),
            ("group_instance_id", pa.string()),
            ("client_id", pa.string()),
            ("client_host", pa.string()),
            ("subscribed_topics", pa.list_(pa.string())),
        ]
    )
    return pa.schema(
        [
            ("kind", pa.string()),
            ("source_partition", pa.int32()),
            ("source_offset", pa.int64()),
            ("source_timestamp", ts),
            ("key_version", pa.int32()),
            ("value_version", pa.int32()),
            ("tombstone", pa.bool_()),
            ("group", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("leader_epoch", pa.int32()),
            ("metadata", pa.string()),
            ("commit_timestamp", ts),
            ("expire_timestamp", ts),
            ("protocol_type", pa.string()),
            ("generation", pa.int32()),
            ("protocol", pa.string()),
            ("leader", pa.string()),
            ("state_timestamp", ts),
            ("members", pa.list_(member)),
            ("reason", pa.string()),
        ]
    )


_CONTROL_KEYS = (b"\x00\x00\x00\x00", b"\x00\x00\x00\x01")
_INT16 = struct.Struct(">h")


def _us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def _key_group(key: bytes) -> str | None:
    """The group id of a record of key type 3+: every KIP-848, share and streams key schema (version 0, never
    flexible) starts with the group id as an int16-length string. None when the key does not hold one."""
    if len(key) < 4:
        return None
    (length,) = _INT16.unpack_from(key, 2)
    if length < 0 or len(key) < 4 + length:
        return None
    try:
        return key[4 : 4 + length].decode("utf-8")
    except UnicodeDecodeError:
        return None


def decode_row(key: bytes | None, value: bytes | None) -> tuple[Any, ...]:
    """The decoded columns of one record (everything after the source columns)."""
    if key is not None and len(key) == 4 and key in _CONTROL_KEYS and value is not None and len(value) == 6:
        return (CONTROL, 0, None, False, *(None,) * 15)
    record = decode_record(key, value)
    tomb = value is None
    if isinstance(record, OffsetCommit):
        return (
            OFFSET_COMMIT,
            _key_version(key),
            record.value_version,
            False,
            record.group,
            record.topic,
            record.partition,
            record.offset,
            record.leader_epoch,
            record.metadata,
            record.commit_timestamp_ms * 1000,
            _us(record.expire_timestamp_ms),
            *(None,) * 7,
        )
    if isinstance(record, OffsetTombstone):
        return (
            OFFSET_TOMBSTONE,
            _key_version(key),
            None,
            True,
            record.group,
            record.topic,
            record.partition,
            *(None,) * 12,
        )
    if isinstance(record, GroupMetadata):
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topics": list(m.subscribed_topics),
            }
            for m in record.members
        ]
        return (
            GROUP_METADATA,
            2,
            record.value_version,
            False,
            record.group,
            *(None,) * 7,
            record.protocol_type,
            record.generation,
            record.protocol,
            record.leader,
            _us(record.current_state_timestamp_ms),
            members,
            None,
        )
    if isinstance(record, GroupTombstone):
        return (GROUP_TOMBSTONE, 2, None, True, record.group, *(None,) * 14)
    if isinstance(record, OtherRecord):
        group = _key_group(key) if key is not None else None
        return (OTHER, record.key_version, None, tomb, group, *(None,) * 14)
    assert isinstance(record, Undecodable)
    return (UNDECODABLE, record.key_version, record.value_version, tomb, *(None,) * 14, record.reason)


def _key_version(key: bytes | None) -> int | None:
    return None if key is None or len(key) < 2 else int(_INT16.unpack_from(key, 0)[0])


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow: Spark's Kafka rows (key, value, partition, offset, timestamp) in, decoded rows out."""
    import pyarrow as pa

    schema = arrow_schema()
    width = len(schema) - 4  # columns after the source ones
    for batch in batches:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        rows = [decode_row(k, v) for k, v in zip(keys, values, strict=True)]
        decoded = list(zip(*rows, strict=True)) if rows else [()] * (width + 1)
        arrays = [
            pa.array(decoded[0], pa.string()),
            batch.column("partition").cast(pa.int32()),
            batch.column("offset").cast(pa.int64()),
            batch.column("timestamp").cast(schema.field("source_timestamp").type),
            *(pa.array(col, schema.field(i).type) for i, col in enumerate(decoded[1:], start=4)),
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
