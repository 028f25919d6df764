"""kafka-python requests whose answers lagwatch decodes itself: the poll's two big answers (OffsetFetch v8 and
DescribeGroups v5-6), and those about KIP-848, streams and share groups (`group_describes`), are read straight
into lagwatch's records, not into an object per field first.

The request stays kafka-python's (sent, counted, retried and version-negotiated by it); only the header it builds
is lagwatch's, so that kafka-python hands the answer's body to lagwatch's decoder. A malformed answer raises
ValueError, which kafka-python treats as it treats its own decoding errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry

from lagwatch.offsets_topic.decode import Malformed


class AnswerDecoder:
    """What kafka-python asks of a response class: its header (parsed by kafka-python's own class), then its body."""

    def __init__(self, response_cls: Any, version: int, decode: Callable[[bytes], Any]) -> None:
        self.response_cls, self.version, self._decode = response_cls, version, decode

    def parse_header(self, buffer: Any) -> Any:
        return self.response_cls.parse_header(buffer, version=self.version)

    def decode(self, buffer: Any) -> Any:
        try:
            return self._decode(buffer.read())
        except Malformed as e:
            name = self.response_cls.__name__.removesuffix("Response")
            raise ValueError(f"malformed {name} v{self.version} answer: {e}") from e


_DECODERS: dict[tuple[int, int], AnswerDecoder] = {}  # (API key, version) -> lagwatch's decoder


def register(response_cls: Any, version: int, decode: Callable[[bytes], Any]) -> AnswerDecoder:
    decoder = _DECODERS[(response_cls.API_KEY, version)] = AnswerDecoder(response_cls, version, decode)
    return decoder


class _Header(RequestHeader, init=False):  # type: ignore[call-arg,misc]
    def get_response_class(self) -> Any:
        decoder = _DECODERS.get((self.request_api_key, self.request_api_version))
        return decoder if decoder is not None else ResponseClassRegistry.get_response_class(self)


class OwnAnswer:
    """Mixed into a kafka-python request class (first among its bases): its answer goes to the decoder registered
    for its API key and the version kafka-python negotiated, or to kafka-python's class for other versions."""

    API_KEY: int
    API_VERSION: int

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = _Header(
            request_api_key=self.API_KEY,
            request_api_version=self.API_VERSION,
            correlation_id=correlation_id,
            client_id=client_id,
        )
