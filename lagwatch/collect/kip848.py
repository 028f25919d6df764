"""ConsumerGroupDescribe (API 69, KIP-848) and StreamsGroupDescribe (API 89, KIP-1071): kafka-python 3.0 has no
class for them, so lagwatch ships their schemas.

The JSON files in `schemas/` describe version 0 of the wire format as Kafka 4 brokers send it (checked byte by
byte against a 4.1.2 broker: the member id is a string, and a member's assignment holds only its topic-partitions).
kafka-python's schema machinery encodes and decodes them like its own messages. A schema that did not match would
make kafka-python drop the connection, failing the poll; the integration test guards it.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage


class ConsumerGroupDescribeRequest(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class StreamsGroupDescribeRequest(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class StreamsGroupDescribeResponse(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass
