"""ListGroups v3-5 answers (every group of a broker) decoded straight into lagwatch's records
(lagwatch.collect.list_groups sends the request).

Why by hand: at 100,000 groups the answer is 3.3 MB; kafka-python decoded it into an object per group (120 ms on
its I/O thread) and lagwatch then built its records from those (63 ms), before any other request of the poll could
be sent. Apart from the request, which is kafka-python's class, so that setup.py can compile it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lagwatch.offsets_topic.decode import WireReader, short_texts

VERSIONS = (3, 4, 5)  # 3: the first flexible version; 4 adds each group's state, 5 its type


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str | None  # ListGroups v4+
    group_type: str | None  # ListGroups v5+: classic, consumer, share, streams


class ListGroupsAnswer:
    __slots__ = ("error_code", "groups", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, error_code: int, groups: list[ListedGroup]) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.groups = groups

    def __repr__(self) -> str:  # kafka-python logs every response at DEBUG: a count, not 100,000 groups
        return f"ListGroupsAnswer(groups={len(self.groups)})"


def decode(data: bytes, version: int) -> ListGroupsAnswer:
    """The body of a ListGroups v3, v4 or v5 answer (after its header). Empty texts read as None for the state and
    type, as kafka-python's records gave them to lagwatch."""
    r = WireReader(data)
    texts = 2 + (version >= 4) + (version >= 5)  # group id, protocol type[, state[, type]]
    throttle = r.int32()
    error_code = r.int16()
    groups: list[ListedGroup] = []
    left = r.compact_array_length()
    names: dict[bytes, str] = {}  # protocol types, states, group types: a few distinct values, decoded once
    while left:
        start = r.tell()
        read, end = _common_run(data, start, left, texts, names, groups)
        r.skip(end - start)
        left -= read
        if not left:
            break
        fields = [r.compact_string() for _ in range(texts)]
        r.skip_tagged_fields()
        groups.append(_listed(fields))
        left -= 1
    r.skip_tagged_fields()
    r.expect_end("ListGroups answer")
    return ListGroupsAnswer(throttle, error_code, groups)


def _listed(fields: list[str]) -> ListedGroup:
    state = fields[2] if len(fields) > 2 else ""
    group_type = fields[3] if len(fields) > 3 else ""
    return ListedGroup(fields[0], fields[1], state or None, group_type or None)


def _common_run(
    data: bytes, pos: int, most: int, texts: int, names: dict[bytes, str], out: list[ListedGroup]
) -> tuple[int, int]:
    """Reads up to `most` groups from `pos` while each has texts shorter than 127 bytes and no tagged fields.
    Returns how many it read and where it stopped; the group there is read in full by `decode`, which also
    reports anything malformed."""
    read = 0
    try:
        while read < most:
            found = short_texts(data, pos, texts)
            if found is None or data[found[1]] != 0:  # a longer text, or tagged fields: read in full
                break
            raw, p = found
            fields = [raw[0].decode()]  # the group id; the others are a few values, decoded once
            fields += [names.get(t) or names.setdefault(t, t.decode()) for t in raw[1:]]
            out.append(_listed(fields))
            pos, read = p + 1, read + 1
    except (IndexError, UnicodeDecodeError):
        pass  # cut short or not UTF-8: `decode` reads this group field by field and says what is wrong
    return read, pos
