"""A real single-node Apache Kafka (KRaft) from Maven Central jars, for the demo and the tests."""

from lagwatch.devbroker.broker import LocalBroker, free_port
from lagwatch.devbroker.jars import DEFAULT_KAFKA_VERSION, ensure_kafka_jars, run_kafka_tool

__all__ = ["DEFAULT_KAFKA_VERSION", "LocalBroker", "ensure_kafka_jars", "free_port", "run_kafka_tool"]
