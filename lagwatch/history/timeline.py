"""A partition's log-end offset over time, bounded in size, answering "when was offset X produced?"."""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

# Enough points to interpolate well across hours of history while bounding memory per partition.
DEFAULT_CAPACITY = 48
RESUME_EPSILON_S = 0.001  # the log end as last seen, held until just before the first poll after a blind spell
RESUME_STRETCH_S = 2 * RESUME_EPSILON_S  # a segment that short is a resumed spell's jump: polls are seconds apart


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
@dataclass
class LogEndTimeline:
    """Points (time, log end) in time order; the log end never decreases along it.

    When full, the interior point whose neighbours are closest in time is dropped: recent history stays dense,
    older history thins out but keeps its reach, so lag in seconds stays answerable for old committed offsets.
    """

    # Machine numbers, not lists of Python objects: about 0.9 KB a partition, not 4 KB (bench/daemon_step_bench.py).
    times: array[float] = field(default_factory=lambda: array("d"))
    ends: array[int] = field(default_factory=lambda: array("q"))
    capacity: int = DEFAULT_CAPACITY

    def add(self, t: float, log_end: int) -> None:
        if self.times and t <= self.times[-1]:
            return  # out-of-order or repeated sample
        if self.ends and log_end < self.ends[-1]:
            # The log was truncated or recreated (topic deleted and created again): history no longer applies.
            del self.times[:]
            del self.ends[:]
        if len(self.ends) >= 2 and self.ends[-1] == log_end == self.ends[-2]:
            self.times[-1] = t  # a flat stretch needs only its first and last point
        else:
            self.times.append(t)
            self.ends.append(log_end)
        if len(self.times) > self.capacity:
            self._thin()

    def resume(self, t: float) -> None:
        """After a blind spell (lagwatch down, polls failing), before the first point after it: what the log grew
        by meanwhile is dated at `t`, when it was seen, not spread over the spell. Lag in seconds for those records
        is then a lower bound (they may be older), never an overstatement: across a two-hour spell, records
        produced 20 s before it ended were "1h 49m behind", and paged critical at once."""
        if self.times and t - RESUME_EPSILON_S > self.times[-1]:
            self.add(t - RESUME_EPSILON_S, self.ends[-1])

    def _thin(self) -> None:
        # The span each interior point covers, computed in C (map over the arrays): once a timeline is full this
        # runs for every partition at every poll, and a key= lambda per point took 6% of a 100k-partition step.
        times, ends = self.times, self.ends
        spans = list(map(operator.sub, times[2:], times[:-2]))
        while True:
            best = spans.index(min(spans)) + 1  # the first interior point with the shortest span, as min(key=) chose
            # Not a point after which the log grew more than twice as fast as before it (the last point of a quiet
            # stretch before a burst): without it the growth is spread back over the stretch, and the burst's
            # records look produced long before they were (lag in seconds overstated: false pages). Where growth
            # slows, a point may go: lag is then understated, never overstated. All such points: the shortest goes.
            before_t, at_t, after_t = times[best - 1], times[best], times[best + 1]
            before_e, at_e, after_e = ends[best - 1], ends[best], ends[best + 1]
            speeds_up = (after_e - at_e) * (at_t - before_t) > 2 * (at_e - before_e) * (after_t - at_t)
            # Nor the end of a resumed blind spell's jump: without it, the jump's records would be spread over the
            # next poll interval, no longer known for the lower bounds they are.
            ends_resume = at_t - before_t <= RESUME_STRETCH_S
            if not (speeds_up or ends_resume) or spans[best - 1] == math.inf:
                break
            spans[best - 1] = math.inf
        del times[best]
        del ends[best]

    @property
    def span_s(self) -> float:
        return self.times[-1] - self.times[0] if self.times else 0.0

    def produced_at(self, offset: int) -> tuple[float, bool] | None:
        """When the record at `offset` was appended: (time, estimated). None when history cannot tell.

        Interpolates between the last point whose log end was <= offset and the next one. Before the first
        point, extrapolates back at the timeline's average production rate, capped at the timeline's own span,
        and marks the answer estimated. Both that and a record of a blind spell (`resume`) are lower bounds.
        """
        # Locals and conditionals, not min/max: asked for every lagging group-partition at every poll.
        times, ends = self.times, self.ends
        if not times:
            return None
        i = bisect_right(ends, offset)  # first point whose log end > offset: the record existed by then
        n = len(ends)
        if i >= n:
            return None  # not produced yet as far as history knows (the caller has lag 0 then)
        if i > 0:
            t0, e0, e1 = times[i - 1], ends[i - 1], ends[i]
            fraction = 1.0
            if e1 > e0:
                fraction = (offset - e0 + 1) / (e1 - e0)  # > 0: ends[i - 1] <= offset
                if fraction > 1.0:
                    fraction = 1.0
            # A record in what the log grew by during a blind spell (the jump `resume` dates at its end): dated
            # at the end of the spell, a lower bound, so estimated (the lag rule never lowers an alert on one).
            return t0 + fraction * (times[i] - t0), times[i] - t0 <= RESUME_STRETCH_S and e1 > e0
        # Older than all history: the record was produced before the first point.
        if n < 2:
            return None  # one point says nothing about how fast the log grows
        first_t, first_end = times[0], ends[0]
        span = times[-1] - first_t
        rate = (ends[-1] - first_end) / span if span > 0 else 0.0
        if rate <= 0:
            return first_t, True
        back = (first_end - offset) / rate
        return first_t - (back if back < span else span), True

    def rate(self, since: float) -> float | None:
        """Records appended per second from `since` to the latest point; None with less than two points."""
        if len(self.times) < 2 or self.times[-1] <= since:
            return None
        start = max(0, bisect_right(self.times, since) - 1)
        dt = self.times[-1] - self.times[start]
        return (self.ends[-1] - self.ends[start]) / dt if dt > 0 else None

    def to_json(self) -> list[list[float]]:
        return [[t, e] for t, e in zip(self.times, self.ends, strict=True)]

    @classmethod
    def from_json(cls, points: list[list[float]], capacity: int = DEFAULT_CAPACITY) -> LogEndTimeline:
        timeline = cls(capacity=capacity)
        for t, e in points:
            timeline.add(float(t), int(e))
        return timeline
