"""The daemon's clock never goes back, whatever the host's clock does, and catches up with it after a step back."""

from __future__ import annotations

import itertools
import logging

import pytest

from lagwatch.clock import SLEW, SteadyClock
from lagwatch.model import GroupKind, TopicPartition
from tests.synthetic import TP, Pipeline, group, snapshot


class HostClock:
    def __init__(self) -> None:
        self.wall, self.mono = 1_700_000_000.0, 1000.0

    def advance(self, s: float) -> None:
        self.wall += s
        self.mono += s


def test_a_small_step_back_is_slewed_out_a_large_one_and_a_step_forward_followed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = HostClock()
    clock = SteadyClock(lambda: host.wall, lambda: host.mono)
    readings = [clock()]
    for _ in range(10):
        host.advance(30)
        readings.append(clock())
    assert readings[-1] == host.wall and clock.ahead_s == 0 and clock.steps_back == 0
    with caplog.at_level(logging.WARNING, "lagwatch.clock"):
        host.wall -= 200  # stepped back 200 s: absorbed
        before = readings[-1]
        for _ in range(60):
            host.advance(30)
            readings.append(clock())
        assert all(b > a for a, b in itertools.pairwise(readings))  # never back, never still
        assert readings[11] == pytest.approx(before + 30 * (1 - SLEW))  # 90 % of the real rate meanwhile
        assert clock.steps_back == 1 and len(caplog.records) == 1  # one step, one line
        assert caplog.records[0].seconds_behind == pytest.approx(200 - 30 * SLEW)  # type: ignore[attr-defined]
        assert 0 < clock.ahead_s < 200 - 60 * 30 * SLEW + 1  # 30 minutes later: caught up by 180 s of it
        for _ in range(10):
            host.advance(30)
            last = clock()
        assert last == host.wall and clock.ahead_s == 0  # caught up within ten times the step
        host.wall -= 3600  # an hour: not absorbed (lagwatch would run an hour ahead of the world for ten hours)
        assert clock() == host.wall and clock.ahead_s == 0
        assert clock.steps_back == 2 and caplog.records[-1].levelno == logging.ERROR
    host.wall += 600  # stepped forward: followed at once
    assert clock() == host.wall
    clock.not_before(host.wall + 50)  # a saved state newer than the host's clock (set back while lagwatch was down)
    host.advance(1)
    assert clock() == pytest.approx(host.wall + 49 + 1 * (1 - SLEW))
    clock.not_before(host.wall + 3 * 3600)  # three hours newer: followed, not absorbed
    assert clock() < host.wall + 50 and clock.steps_back == 4


def test_a_poll_dated_before_the_last_changes_nothing_and_loses_no_notification() -> None:
    """The pure step's own guard (a lake replayed, a clock not lagwatch's): a host clock stepped back an hour
    resolved every firing alert without a notification, and a consumer that went down after it paged 50 minutes
    late. A poll dated before the last is not folded in; the alerts stay as they are."""
    p = Pipeline()
    down = lambda: group("down", committed={TP: 10}, state="Empty", members=0)  # noqa: E731
    for i in range(20):
        p.step(snapshot(i * 30.0, [down()], {TP: 100 * (i + 1)}))
    firing = {a.key for a in p.book.alerts.values() if a.state == "firing"}
    assert firing and p.sent
    told = len(p.sent)
    evaluation = p.step(snapshot(600.0 - 3600, [down()], {TP: 2100}))
    assert evaluation.findings == () and evaluation.frozen_groups is None
    assert {a.key for a in p.book.alerts.values() if a.state == "firing"} == firing and len(p.sent) == told
    # What happened while polls were held was not seen: a blind spell, after which evidence starts afresh
    p.step(snapshot(600.0, [down()], {TP: 2200}))
    assert p.history.evidence_since == 600.0


def test_exact_clocks_read_while_lagwatch_runs_ahead_are_moved_by_its_lead() -> None:
    """The brokers date `__consumer_offsets` records by the world's clock. While lagwatch's runs 250 s ahead after
    a step back, a healthy group's 40-s rolling restart (Empty written by the coordinator) looked Empty for 4
    minutes: `stopped` paged critical. Moved by the lead, it is Empty for the 40 s it was."""
    from lagwatch.offsets_topic import GroupMetadata

    p = Pipeline()
    lead = 250.0
    for i in range(10):
        p.step(snapshot(lead + i * 30.0, [group(committed={TP: 100 * i})], {TP: 100 * i + 500}))
    world = 300.0  # the coordinator writes the group Empty at world time 300 (lagwatch's 550)
    p.history.observe_records([GroupMetadata("g", "consumer", 7, "range", None, int(world * 1000), (), 3)], True, lead)
    assert p.history.empty_clock("g").since == world + lead  # type: ignore[union-attr]
    for i in range(10, 12):  # Empty at two polls, 40 s after the write: within the stopped window
        evaluation = p.step(snapshot(lead + i * 30.0, [group(state="Empty", members=0)], {TP: 100 * i + 500}))
    assert "stopped" not in {f.rule for f in evaluation.findings}


@pytest.mark.parametrize("step_back", [200.0, 3600.0])
def test_polls_dated_by_the_steady_clock_keep_their_alerts_across_a_step_back(step_back: float) -> None:
    """A step back with the daemon's clock dating the polls: the firing alerts stay up and nothing is resolved.
    A consumer that stops after a step the clock absorbs (200 s) pages as it would have without it; after a larger
    one (an hour), polls are held until the clock passes the last one taken, then it pages."""
    host = HostClock()
    clock = SteadyClock(lambda: host.wall, lambda: host.mono)
    pay = TopicPartition("pay", 0)
    p = Pipeline()
    later_committed = 0
    first: dict[str, int] = {}
    for i in range(240):
        if i == 20:
            host.wall -= step_back
        end = 100 * (i + 1)
        later_committed = end if i < 30 else later_committed
        groups = [
            group("down", committed={TP: 10}, state="Empty", members=0),
            group(
                "later",
                committed={pay: later_committed},
                subscribed=("pay",),
                state="Stable" if i < 30 else "Empty",
                members=1 if i < 30 else 0,
                kind=GroupKind.CLASSIC,
            ),
        ]
        p.step(snapshot(clock(), groups, {TP: end, pay: end}))
        for n in p.sent:
            for a in n.alerts:
                first.setdefault(f"{a.group}:{a.rule}:{a.state}", i)
        host.advance(30)
    assert not any(key.endswith(":resolved") for key in first), first
    assert first["down:stopped:firing"] < 20
    # It stopped at poll 30; after the hour's step, polls are held from poll 20 until the clock passes poll 19's time
    judged_from = 30 if step_back < 300 else 20 + step_back / 30
    assert judged_from < first["later:stopped:firing"] <= judged_from + 7, first
