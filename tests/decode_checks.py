"""Checks every answer decoder of lagwatch's own must pass (lagwatch.collect.own_answers)."""

from __future__ import annotations

import io
from typing import Any

import pytest


def refuses_damage(decoder: Any, data: bytes, cut: int, what: str, answer: type) -> None:
    """`data` cut short by `cut` bytes is a ValueError naming the answer (`what`, e.g. "ListGroups v5"); with a byte
    left over, a ValueError too; whole, it decodes to `answer`."""
    with pytest.raises(ValueError, match=what):
        decoder.decode(io.BytesIO(data[: len(data) - cut]))
    with pytest.raises(ValueError):
        decoder.decode(io.BytesIO(data + b"\x00"))  # bytes left over
    assert isinstance(decoder.decode(io.BytesIO(data)), answer)


def sends_kafkas_bytes(ours: Any, theirs: Any, version: int, decoder: Any) -> None:
    """Our request at `version` is kafka-python's (`theirs`) byte for byte; only the answer's decoder differs."""
    for request in (ours, theirs):
        request.API_VERSION = version  # as kafka-python's version negotiation sets it
        request.with_header(correlation_id=7, client_id="lagwatch")
    assert bytes(ours.encode(header=True, framed=True)) == bytes(theirs.encode(header=True, framed=True))
    assert ours._header.get_response_class() is decoder
    assert theirs._header.get_response_class() is not decoder
