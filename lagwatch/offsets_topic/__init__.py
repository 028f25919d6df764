"""CORE: the records of Kafka's `__consumer_offsets` topic, decoded without Kafka's client (pure, standard library
only), so that the daemon's reader and the Spark backfill decode them the same way."""

from lagwatch.offsets_topic.decode import (
    GroupMember,
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    OtherRecord,
    Record,
    Undecodable,
    decode_record,
)

__all__ = [
    "GroupMember",
    "GroupMetadata",
    "GroupTombstone",
    "OffsetCommit",
    "OffsetTombstone",
    "OtherRecord",
    "Record",
    "Undecodable",
    "decode_record",
]
