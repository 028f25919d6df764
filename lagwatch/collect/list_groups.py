"""ListGroups (every group of a broker, the first request of a poll), its answer decoded by lagwatch for versions
3-5 (lagwatch.collect.list_groups_answer); older versions through kafka-python as before."""

from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from lagwatch.collect.list_groups_answer import VERSIONS, decode
from lagwatch.collect.own_answers import AnswerDecoder, OwnAnswer, register


class OwnListGroupsRequest(OwnAnswer, ListGroupsRequest, init=False):  # type: ignore[call-arg,misc]
    """kafka-python's ListGroupsRequest (every group, any state and type): its v3-5 answer is decoded by lagwatch."""

    def __init__(self) -> None:
        super().__init__(min_version=0)


def _decoder(version: int) -> AnswerDecoder:
    return register(ListGroupsResponse, version, lambda data: decode(data, version))


DECODERS = {version: _decoder(version) for version in VERSIONS}
