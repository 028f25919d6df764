"""EDGE: reads a Kafka cluster with kafka-python and hands back plain snapshots (lagwatch.model)."""

from lagwatch.collect.poll import ClusterPoller, classify

__all__ = ["ClusterPoller", "classify"]
