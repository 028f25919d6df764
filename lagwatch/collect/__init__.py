"""EDGE: reads a Kafka cluster with kafka-python and hands back plain snapshots (lagwatch.model)."""

from lagwatch.collect.assemble import classify
from lagwatch.collect.poll import ClusterPoller

__all__ = ["ClusterPoller", "classify"]
