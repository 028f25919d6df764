"""ConsumerGroupDescribe (API 69, KIP-848), StreamsGroupDescribe (API 89, KIP-1071), ShareGroupDescribe (API 77) and
DescribeShareGroupOffsets (API 90, KIP-932): kafka-python 3.0 has no class for them, so lagwatch ships their schemas.

The share groups' schemas are kafka-clients 4.4.0's, unchanged. ShareGroupDescribe is v1 on every broker from 4.1
(v0 was 4.0's early access). DescribeShareGroupOffsets is v0 on 4.1, and v1 from 4.2, whose per-partition `Lag`
(KIP-1226) is the broker's own share-partition lag; a v0 answer decodes it as its default, -1.

The JSON files in `schemas/` describe version 0 of the wire format as Kafka 4 brokers send it (checked byte by
byte against a 4.1.2 broker: the member id is a string, and a member's assignment holds only its topic-partitions).
kafka-python's schema machinery encodes them like its own messages; their answers are decoded by lagwatch
(`group_describes`, at these schemas' versions), other versions by kafka-python. A schema that did not match would
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


class ShareGroupDescribeRequest(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json="lagwatch.collect.schemas"):  # type: ignore[call-arg,misc]
    pass
