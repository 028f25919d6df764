"""CORE: lag math over plain snapshots. No I/O, no clock reads, no Kafka imports."""

from lagwatch.lag.offsets import GroupLag, LagState, PartitionLag, TopicLag, group_lag, partition_lag

__all__ = ["GroupLag", "LagState", "PartitionLag", "TopicLag", "group_lag", "partition_lag"]
