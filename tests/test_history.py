"""History and lag in seconds: interpolation, bounds, never NaN/Inf/negative, persistence."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.history import ClusterHistory, LogEndTimeline, lag_seconds
from tests.synthetic import TP, group, snapshot


def test_interpolates_when_the_committed_record_was_produced() -> None:
    tl = LogEndTimeline()
    for t, end in [(0, 0), (10, 100), (20, 200), (30, 300)]:
        tl.add(t, end)
    # Record 150 was appended between t=10 (end 100) and t=20 (end 200).
    assert lag_seconds(tl, 150, 300, now=30).seconds == 30 - 15.1
    assert lag_seconds(tl, 300, 300, now=30).seconds == 0.0  # caught up is 0 s


def test_unknown_with_too_little_history_and_estimated_beyond_it() -> None:
    tl = LogEndTimeline()
    tl.add(100, 1000)
    assert lag_seconds(tl, 500, 1000, now=100).seconds is None  # one point: unknown, not 0
    tl.add(110, 1100)  # 10 records/s
    lt = lag_seconds(tl, 950, 1100, now=110)
    assert lt.estimated and lt.seconds is not None
    assert lt.seconds == 10 + 5  # 50 records before the first point at 10/s
    far = lag_seconds(tl, 0, 1100, now=110)  # 100 s back at that rate, but capped at the span (10 s)
    assert far.estimated and far.seconds == 20


def test_timeline_bounded_and_keeps_reach() -> None:
    tl = LogEndTimeline(capacity=16)
    for i in range(1000):
        tl.add(float(i), i * 10)
    assert len(tl.times) == 16 and tl.times[0] == 0.0 and tl.times[-1] == 999.0
    assert lag_seconds(tl, 5000, 9990, now=999).seconds is not None


def test_truncated_log_restarts_the_timeline() -> None:
    tl = LogEndTimeline()
    tl.add(0, 500)
    tl.add(10, 600)
    tl.add(20, 5)  # topic deleted and created again
    assert list(tl.ends) == [5]


@given(
    points=st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 10**9)), min_size=0, max_size=40),
    committed=st.integers(0, 10**9),
    end=st.integers(0, 10**9),
    now=st.floats(0, 2e6),
)
def test_lag_seconds_never_nan_inf_or_negative(
    points: list[tuple[float, int]], committed: int, end: int, now: float
) -> None:
    tl = LogEndTimeline(capacity=12)
    for t, e in sorted(points):
        tl.add(t, e)
    lt = lag_seconds(tl, committed, end, now)
    assert lt.seconds is None or (math.isfinite(lt.seconds) and lt.seconds >= 0)
    if committed >= end:
        assert lt.seconds == 0.0


def test_clocks_observed_and_assumed() -> None:
    h = ClusterHistory("c")
    h.observe(snapshot(0, [group("a", state="Empty", members=0), group("b")], {TP: 10}))
    assert h.groups["a"].empty_since is not None and not h.groups["a"].empty_since.observed
    assert h.groups["b"].partitions[TP].last_commit_change.observed is False  # type: ignore[union-attr]
    h.observe(
        snapshot(
            30,
            [group("a", state="Empty", members=0), group("b", state="Empty", members=0, committed={TP: 4})],
            {TP: 10},
        )
    )
    assert h.groups["b"].empty_since == h.groups["b"].empty_since.__class__(30, True)  # seen becoming Empty
    assert h.groups["b"].partitions[TP].last_commit_change.__repr__().startswith("Clock(since=30")  # type: ignore[union-attr]


def test_failed_poll_changes_nothing_and_vanished_offsets_are_remembered() -> None:
    h = ClusterHistory("c")
    h.observe(snapshot(0, [group("a", committed={TP: 3})], {TP: 10}))
    h.observe(snapshot(10, [], {}, error="down"))
    assert h.groups["a"].vanished is None and h.groups["a"].gone_since is None
    h.observe(snapshot(20, [group("a", committed={}, state="Empty", members=0)], {TP: 10}))
    assert h.groups["a"].vanished is None and h.groups["a"].missing == {TP: 20}  # one answer is no proof
    h.observe(snapshot(30, [group("a", committed={}, state="Empty", members=0)], {TP: 10}))
    vanished = h.groups["a"].vanished
    assert vanished is not None and vanished.offsets == {TP: 3} and vanished.at == 20


def test_history_round_trips_through_json() -> None:
    h = ClusterHistory("c")
    for t in range(5):
        h.observe(snapshot(t * 10.0, [group("a", committed={TP: t * 3}, state="Empty", members=0)], {TP: 100 + t}))
    again = ClusterHistory.from_json(json.loads(json.dumps(h.to_json())))
    assert again.to_json() == h.to_json()
    assert lag_seconds(again.timelines[TP], 102, 104, 40) == lag_seconds(h.timelines[TP], 102, 104, 40)


def _records() -> Any:
    from lagwatch.offsets_topic import (
        GroupMember,
        GroupMetadata,
        GroupTombstone,
        OffsetCommit,
        OffsetTombstone,
        OtherRecord,
    )

    groups, topics, parts, times = st.sampled_from("ab"), st.sampled_from("xy"), st.integers(0, 1), st.integers(1, 9)
    return st.lists(
        st.one_of(
            st.builds(lambda g, t, p, ms: OffsetCommit(g, t, p, ms, None, "", ms * 1000, None, 3), groups, topics,
                      parts, times),
            st.builds(OffsetTombstone, groups, topics, parts),
            st.builds(lambda g, ms, empty: GroupMetadata(g, "consumer", 1, None, None, ms * 1000, () if empty else
                      (GroupMember("m", None, "c", "h", ("x",)),), 3), groups, times, st.booleans()),
            st.builds(GroupTombstone, groups),
            st.builds(OtherRecord, st.integers(3, 9)),
        ),
        max_size=30,
    )  # fmt: skip


@given(before=_records(), batch=_records())
def test_compacted_records_leave_the_exact_clocks_as_the_whole_batch(before: list[Any], batch: list[Any]) -> None:
    """What the lake records between two polls (compact_records) replays to the same clocks as every record read,
    whatever the clocks held before: commits, Empty times, and what tombstones moved aside."""
    from lagwatch.history import ExactClocks, compact_records

    def clocks(records: list[Any]) -> tuple[Any, ...]:
        c = ExactClocks()
        for r in [*before, *records]:
            c.apply(r)
        return c.commits, c.empty_since, c.removed_commits, c.removed_empty_since

    compacted = compact_records(batch)
    assert clocks(compacted) == clocks(batch)
    assert len(compacted) <= len(batch)


# -- the per-poll rings against the list of samples they replaced ----------------------------------------------------

_TP2 = TP._replace(partition=1)
_POLL = st.tuples(
    st.sampled_from(["ok", "ok", "ok", "unreadable", "failed", "absent"]),
    st.dictionaries(st.sampled_from([TP, _TP2]), st.integers(0, 60), max_size=2),  # committed offsets
    st.booleans(),  # TP2 assigned to a member
    st.booleans(),  # TP's log end missing from the poll
    st.integers(1, 40),  # seconds since the previous poll
)


class _Reference:
    """The samples as schema 2 kept them: a list per group-partition of (time, committed, log end), appended at every
    good poll that read the group, for every partition it committed or was assigned; cut to the polls the rings
    keep (the last MAX_SAMPLES good polls)."""

    def __init__(self) -> None:
        self.samples: dict[Any, list[tuple[int, float, int | None, int | None]]] = {}
        self.good_polls = 0
        self.gone = False
        self.missed: set[Any] = set()  # committed offsets the last readable poll left out: vanished if this one does

    def observe(self, kind: str, t: float, committed: dict[Any, int], assigned: set[Any], ends: dict[Any, int]) -> None:
        if kind == "failed":
            return
        self.good_polls += 1
        if kind == "absent":
            self.gone = True
            return
        if kind == "unreadable":
            return
        if self.gone:
            self.samples, self.gone, self.missed = {}, False, set()  # a group that comes back starts a new track
        had = {tp for tp, rows in self.samples.items() if rows and rows[-1][2] is not None}
        for tp in {*committed, *assigned}:
            self.samples.setdefault(tp, []).append((self.good_polls, t, committed.get(tp), ends.get(tp)))
        subscribed = {"orders"} if assigned else set()  # the member _replay makes subscribes to TP's topic
        missed = set()
        for tp in had - set(committed) - assigned:
            if tp.topic not in subscribed:  # Kafka expires no offset of a topic a member subscribes to
                if tp in self.missed:  # left out by two answers in a row: vanished
                    del self.samples[tp]
                else:
                    missed.add(tp)
        self.missed = missed

    def kept(self, tp: Any) -> list[tuple[float, int | None, int | None]]:
        from lagwatch.history.store import MAX_SAMPLES

        if self.gone:
            return []  # a vanished group's track has no windows (the rules see no group)
        return [(t, c, e) for poll, t, c, e in self.samples.get(tp, []) if poll > self.good_polls - MAX_SAMPLES]

    def window(self, tp: Any, since: float) -> list[tuple[float, int | None, int | None]]:
        out = []
        for s in reversed(self.kept(tp)):
            out.append(s)
            if s[0] <= since:
                break
        return out[::-1]

    def consumption_rate(self, tp: Any, since: float) -> float | None:
        last = first = None
        for s in reversed(self.kept(tp)):
            if s[1] is not None:
                last = last or s
                first = s
            if s[0] <= since:
                break
        if first is None or last is None or last[0] <= first[0]:
            return None
        return max(0.0, (last[1] - first[1]) / (last[0] - first[0]))  # type: ignore[operator]


def _replay(polls: list[Any], group_lags_each_poll: bool = False) -> tuple[ClusterHistory, _Reference, float]:
    """`group_lags_each_poll`: after every poll, aligned_group_lags for every recent window start (its log ends
    are memoised per start and poll: an answer must never outlive its poll)."""
    import dataclasses

    h, ref, t = ClusterHistory("c"), _Reference(), 0.0
    for i, (kind, committed, tp2_assigned, no_end, step) in enumerate(polls):
        t += step
        assigned = {_TP2} if tp2_assigned else set()
        ends = {_TP2: 100 + i} if no_end else {TP: 100 + i, _TP2: 100 + i}
        g = group("g", committed=committed, assigned=tuple(assigned), members=1 if assigned else 0)
        if kind == "unreadable":
            g = dataclasses.replace(g, error="coordinator not available")
        groups = [] if kind == "absent" else [g]
        h.observe(snapshot(t, groups, ends, error="down" if kind == "failed" else None))
        ref.observe(kind, t, committed, assigned, ends)
        track = h.groups.get("g")
        if group_lags_each_poll and track is not None:
            newest = h.poll_times_first + len(h.poll_times) - 1
            for start in [None, *range(max(h.poll_times_first - 1, newest - 24), newest + 1)]:
                assert h.aligned_group_lags(track.partitions, start) == _group_lags(h, track.partitions, start)
    return h, ref, t


def _windows(h: ClusterHistory, ref: _Reference, now: float) -> None:
    track = h.groups.get("g")
    for tp in (TP, _TP2):
        progress = track.partitions.get(tp) if track is not None and track.gone_since is None else None
        for back in (0, 15, 45, 120, 600, 10_000):
            since = now - back
            got = [(s.t, s.committed, s.log_end) for s in h.window(progress, tp, since)] if progress else []
            assert got == ref.window(tp, since), (tp, back)
            rate = h.consumption_rate(progress, since) if progress else None
            assert rate == ref.consumption_rate(tp, since), (tp, back)
            aligned = h.aligned_window(progress, tp, h.window_start(since)) if progress else None
            if aligned is not None:  # exactly the window, every sample with both values, and covering `since`
                window = ref.window(tp, since)
                assert list(zip(*aligned, strict=True)) == [(c, e) for _, c, e in window], (tp, back)
                assert len(window) >= 2 and window[0][0] <= since
    if track is not None:
        for back in (0, 15, 45, 120, 600, 10_000):
            start = h.window_start(now - back)
            assert h.aligned_group_lags(track.partitions, start) == _group_lags(h, track.partitions, start), back


def _group_lags(h: ClusterHistory, partitions: dict, start: int | None) -> tuple[int, int] | str | None:  # type: ignore[type-arg]
    """aligned_group_lags by its definition: aligned_window per partition, in order."""
    first_lag = last_lag = 0
    for tp, progress in partitions.items():
        aligned = h.aligned_window(progress, tp, start)
        if aligned is None:
            return None
        committed, ends = aligned
        if min(committed) != max(committed):
            return "moved"
        first_lag += max(0, ends[0] - committed[0])
        last_lag += max(0, ends[-1] - committed[0])
    return first_lag, last_lag


def test_aligned_windows_are_the_common_case() -> None:
    """Every poll read the group and both log ends: the aligned window is there (the property above is not
    vacuous), and a gap or a missing log end in the window sends the rules back to `window()`."""
    steady = [("ok", {TP: 5, _TP2: 7}, False, False, 30)] * 30
    h, ref, now = _replay(steady, group_lags_each_poll=True)
    assert h.aligned_group_lags(h.groups["g"].partitions, h.window_start(now - 300)) == (114 + 112, 124 + 122)
    track = h.groups["g"]
    for tp in (TP, _TP2):
        committed, ends = h.aligned_window(track.partitions[tp], tp, h.window_start(now - 300))  # type: ignore[misc]
        assert len(committed) == 11 and set(committed) == {5 if tp == TP else 7} and list(ends) == list(range(119, 130))
    _windows(h, ref, now)
    gap = [*steady[:20], ("unreadable", {}, False, False, 30), *steady[:9]]
    h, ref, now = _replay(gap)
    assert h.aligned_window(h.groups["g"].partitions[TP], TP, h.window_start(now - 300)) is None
    assert h.aligned_window(h.groups["g"].partitions[TP], TP, h.window_start(now - 200)) is not None
    no_end = [*steady[:25], ("ok", {TP: 5, _TP2: 7}, False, True, 30), *steady[:4]]
    h, ref, now = _replay(no_end)
    assert h.aligned_window(h.groups["g"].partitions[TP], TP, h.window_start(now - 300)) is None
    assert h.aligned_window(h.groups["g"].partitions[_TP2], _TP2, h.window_start(now - 300)) is not None
    _windows(h, ref, now)


@given(st.lists(_POLL, min_size=1, max_size=90))
def test_rings_keep_exactly_the_samples_the_lists_kept(polls: list[Any]) -> None:
    """Windows and consumption rates from the rings equal those from lists of samples, through unreadable and
    vanished groups, failed polls, partitions assigned and not, missing log ends, and past MAX_SAMPLES polls; and
    again after a save and a load."""
    h, ref, now = _replay(polls, group_lags_each_poll=True)
    _windows(h, ref, now)
    _windows(ClusterHistory.from_json(json.loads(json.dumps(h.to_json()))), ref, now)


@given(st.lists(_POLL, min_size=1, max_size=70))
def test_a_schema_2_history_loads_with_the_same_windows(polls: list[Any]) -> None:
    h, ref, now = _replay(polls)
    track = h.groups.get("g")
    if track is None or track.gone_since is not None:
        return
    document = json.loads(json.dumps(h.to_json()))
    raw_group = document["groups"]["g"]
    raw_group["partitions"] = [
        [tp.topic, tp.partition, [p.last_commit_change.since, p.last_commit_change.observed] if p.last_commit_change
         else None, [list(s) for s in ref.kept(tp)]]
        for tp, p in track.partitions.items()
    ]  # fmt: skip
    v2 = {
        "schema_version": 2,
        **{k: document[k] for k in ("cluster", "last_ok_poll", "polls", "evidence_since", "blind")},
        "timelines": [[tp.topic, tp.partition, tl.to_json()] for tp, tl in h.timelines.items()],
        "groups": {"g": raw_group},
    }
    loaded = ClusterHistory.from_json(v2)
    _windows(loaded, ref, now)
    assert loaded.timelines.keys() == h.timelines.keys()


def test_damaged_history_arrays_are_a_value_error() -> None:
    import base64
    import zlib

    h, _, _ = _replay([("ok", {TP: 3}, False, False, 10)] * 3)
    document = h.to_json()
    for damaged in (
        {**document, "arrays": "not base64!"},
        {**document, "arrays": base64.b64encode(b"not zlib").decode()},
        {**document, "arrays": base64.b64encode(zlib.compress(b"\0" * 7)).decode()},  # too short
        {**document, "arrays": base64.b64encode(zlib.compress(base64.b64decode(document["arrays"]) + b"x")).decode()},
        {**document, "byteorder": "big"},
    ):
        with pytest.raises(ValueError, match=r"history arrays|base64|Incorrect padding|byte order"):
            ClusterHistory.from_json(damaged)


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 30)), min_size=1, max_size=120))
def test_thinning_drops_the_point_with_the_shortest_span_first(steps: list[tuple[int, int]]) -> None:
    """The timeline keeps what the plain definition keeps: when full, drop the first interior point whose neighbours
    are closest in time, among those after which the log does not grow more than twice as fast as before them
    (among all, when every one does)."""

    def speeds_up(i: int) -> bool:
        before = (ends[i] - ends[i - 1]) / (times[i] - times[i - 1])
        return (ends[i + 1] - ends[i]) / (times[i + 1] - times[i]) > 2 * before

    tl, times, ends, t, end = LogEndTimeline(capacity=12), [], [], 0.0, 0
    for dt, grew in steps:
        t, end = t + dt, end + grew
        tl.add(t, end)
        if len(ends) >= 2 and ends[-1] == end == ends[-2]:
            times[-1] = t
        else:
            times.append(t)
            ends.append(end)
        if len(times) > 12:
            interior = range(1, len(times) - 1)
            best = min([i for i in interior if not speeds_up(i)] or interior, key=lambda i: times[i + 1] - times[i - 1])
            del times[best], ends[best]
    assert (list(tl.times), list(tl.ends)) == (times, ends)


@given(st.integers(0, 2**32))
@settings(max_examples=10, deadline=None)
def test_bursts_on_a_quiet_topic_are_dated_near_when_they_landed_however_thin_the_timeline(seed: int) -> None:
    """A quiet topic: 3,000 records at once every 3 to 20 minutes, drained at 15 records/s, polled every 30 s for a
    day, so a full timeline drops points. Lag in seconds is never overstated by more than a poll and a half.
    Dropping the last quiet point before a burst dated the burst back into the quiet stretch: lag in seconds of
    up to 970 s for a true 200 s, and lag warnings 10 to 23 times a day (false pages)."""
    rng = random.Random(seed)
    tl, end, committed, next_burst = LogEndTimeline(), 0, 0, 300.0
    bursts: list[tuple[int, float]] = []  # (first offset, when it landed)
    for i in range(2880):
        t = i * 30.0
        while next_burst <= t:
            bursts.append((end, next_burst))
            end += 3000
            next_burst += rng.uniform(180, 1200)
        tl.add(t, end)
        committed = min(end, committed + 15 * 30)
        if committed < end:
            produced = tl.produced_at(committed)
            assert produced is not None
            landed = max(at for first, at in bursts if first <= committed)
            assert (t - produced[0]) - (t - landed) <= 45, (t, committed)


def test_rings_shrink_to_a_smaller_keep_at_the_next_poll() -> None:
    """A history saved under longer windows (64 polls) and loaded by a daemon that needs 22: the next poll cuts
    every ring to 22, and the windows within them are unchanged."""
    steady = [("ok", {TP: 5, _TP2: 7}, False, False, 30)] * 70
    h, _, now = _replay(steady)
    before = [(s.t, s.committed, s.log_end) for s in h.window(h.groups["g"].partitions[TP], TP, now - 300)]
    h.keep = 22
    h.observe(snapshot(now + 30, [group("g", committed={TP: 5, _TP2: 7})], {TP: 170, _TP2: 170}))
    assert len(h.poll_times) == 22 and h.poll_times[-1] == now + 30
    rings = [p.committed for p in h.groups["g"].partitions.values()] + list(h.log_ends.values())
    assert all(len(r.values) == 22 and r.first == h.poll_times_first for r in rings)
    after = [(s.t, s.committed, s.log_end) for s in h.window(h.groups["g"].partitions[TP], TP, now - 300)]
    assert after[:-1] == before and after[-1] == (now + 30, 5, 170)


def test_a_group_keeping_up_is_not_said_to_fall_behind_by_the_rates_noise() -> None:
    """The demo's fast consumer, lag 10: 19.80 records/s consumed against 19.82 produced (its commits land in steps).
    The API said falling_behind: true. A real shortfall still says it."""
    from lagwatch.history import GroupMeasure
    from lagwatch.lag import group_lag
    from lagwatch.model import PartitionOffsets

    lag = group_lag(group(committed={TP: 90}), {TP: PartitionOffsets(0, 100)})

    def measure(produced: float, consumed: float) -> GroupMeasure:
        return GroupMeasure(lag, (), b"", (), (), None, False, produced, consumed, None, (), ())

    assert not measure(19.82, 19.80).falling_behind
    assert measure(20.0, 15.0).falling_behind
    assert not measure(20.0, 25.0).falling_behind
