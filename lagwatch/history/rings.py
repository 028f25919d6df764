"""Per-poll values kept as machine integers, aligned on the cluster's poll numbers.

Why not a deque of Sample objects per group-partition: at 64 samples each, 100k group-partitions held 6.4M objects
(about 130 bytes each: 3 GB of RSS at steady state) and wrote them as 6.4M JSON lists at every history save.
Here a group-partition holds one array of committed offsets (8 bytes a poll); the poll times are kept once per
cluster and the log ends once per partition, since every group sees the same ones at a poll.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

NOT_SAMPLED = -(2**63)  # the poll did not sample this value (group unreadable, partition not assigned then)
NO_VALUE = NOT_SAMPLED + 1  # sampled, but there was nothing (no committed offset, no log end)


def _offsets() -> array[int]:
    return array("q")


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
@dataclass(slots=True)
class PollRing:
    """Values at consecutive polls from poll number `first` on; NOT_SAMPLED where a poll left a gap."""

    first: int = 0
    values: array[int] = field(default_factory=_offsets)

    def put(self, poll: int, value: int | None, keep: int) -> None:
        """Records `value` (None: NO_VALUE) at `poll`, keeping only the last `keep` polls."""
        values = self.values
        end = self.first + len(values)
        if poll == end and values:  # the next poll, as at almost every call: append, drop the oldest when full
            # The oldest go first, then the new value: a full ring keeps its length, and its array never grows
            # past `keep` (appended first, every full ring's array was reallocated with room for a few more,
            # 24 bytes a group-partition for nothing: 24 MB at 1M).
            excess = len(values) + 1 - keep
            if excess > 0:  # one, or more when `keep` shrank (a history saved under longer windows)
                del values[:excess]
                self.first += excess
                values.append(NO_VALUE if value is None else value)
            else:
                values.append(NO_VALUE if value is None else value)
                if excess == 0:  # full for the first time: its array as long as it, no spare room from growing
                    self.values = array("q", values)
            return
        keep_from = poll - keep + 1
        if not values or end < keep_from or poll < end:
            del values[:]  # nothing kept is recent enough (or polls restarted): start afresh
            self.first = poll
        elif poll > end:
            values.extend(array("q", [NOT_SAMPLED]) * (poll - end))
        values.append(NO_VALUE if value is None else value)
        if self.first < keep_from:
            del values[: keep_from - self.first]
            self.first = keep_from

    @property
    def last(self) -> int:
        """The newest value recorded (NOT_SAMPLED when none)."""
        return self.values[-1] if self.values else NOT_SAMPLED
