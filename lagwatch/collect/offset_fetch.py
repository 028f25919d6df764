"""OffsetFetch v8 answers (every group's committed offsets, one request per coordinator) decoded by lagwatch.

Why by hand: at 10,000 groups x 10 partitions the answer is 2.2 MB. kafka-python decodes it into an object per
partition and lagwatch then built its own records from those: 0.29 s of CPU with the garbage collector off
(about 0.5 s with it), on kafka-python's I/O thread, and in a poll twice that while the poll thread competes for
the GIL. Reading the bytes straight into lagwatch's records (with the reader of the `__consumer_offsets`
decoder, and each topic's run of plain commits unpacked in one call) takes 75 ms (115 ms with an unpack per
partition; bench/offset_fetch_bench.py, which also checks that both decoders agree on a real broker's answer).
The poll at that size went from about 1.05 s to 0.5-0.6 s (bench/daemon_step_bench.py --kafka).

Only version 8 (Kafka 3.0+: every group in one request) is decoded (lagwatch.collect.offset_fetch_answer); older versions, and everything else,
go through kafka-python as before. The request is kafka-python's class (sent, counted and retried by it), its
bytes written here: the tests require them equal to kafka-python's own encoding. A malformed answer raises
ValueError, which kafka-python treats as it treats its own decoding errors.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from lagwatch.collect.offset_fetch_answer import VERSION, decode
from lagwatch.collect.own_answers import OwnAnswer, register


class OffsetFetchV8Request(OwnAnswer, OffsetFetchRequest, init=False):  # type: ignore[call-arg,misc]
    """kafka-python's OffsetFetchRequest (sent, counted and retried by kafka-python), for every committed offset of
    `group_ids`, encoded by lagwatch: kafka-python built an object per group and encoded them one field at a time,
    8 % of a poll at 10,000 groups. Its v8 answer is decoded by `decode`."""

    def __init__(self, group_ids: list[str]) -> None:
        super().__init__(groups=[], require_stable=False, min_version=VERSION, max_version=VERSION)
        self.group_ids = group_ids

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        """The bytes kafka-python would send for OffsetFetchRequest(groups=[{group_id, topics: null}...]) v8."""
        if (version if version is not None else self.API_VERSION) != VERSION:
            raise ValueError(f"OffsetFetchV8Request encodes version {VERSION} only")
        self.API_VERSION = VERSION
        parts = [self.encode_header(flexible=True)] if header else []
        parts.append(_uvarint(len(self.group_ids) + 1))  # compact array: length + 1
        for group_id in self.group_ids:
            name = group_id.encode()
            # compact string, then topics: null (compact length 0: every committed offset), no tagged fields
            parts += (_uvarint(len(name) + 1), name, b"\x00\x00")
        parts.append(b"\x00\x00")  # require_stable false, no tagged fields
        body = b"".join(parts)
        return struct.pack(">i", len(body)) + body if framed else body

    def __repr__(self) -> str:  # kafka-python logs requests at DEBUG: a count, not 10,000 names
        return f"OffsetFetchV8Request(groups={len(self.group_ids)})"


def _uvarint(value: int) -> bytes:
    """Kafka's unsigned varint: 7 bits a byte, low bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_Decoder = register(OffsetFetchResponse, VERSION, decode)
