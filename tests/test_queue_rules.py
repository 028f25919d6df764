"""Share groups (queues) through the daemon's own pipeline step: `stalled` and `stopped` from the broker's lag,
never from the position lagwatch derives from it (log end - lag), which drifts by a few records under production
and is no commit: no rewind, no expiry, no `no_commit`, and no false page for an idle queue, one drained in bursts,
or members joining and leaving."""

from __future__ import annotations

from lagwatch.model import CommittedOffset, GroupKind, GroupSnapshot, Member, ShareOffset
from tests.synthetic import TP, Pipeline, snapshot

WINDOWS = {"stalled": {"window_s": 120}, "stopped": {"window_s": 120}, "falling_behind": {"window_s": 120}}
QUIET_LAG = {"lag": {"warning": {"offsets": 100_000}, "for_s": 0}}


def queue(lag: int | None, end: int, members: int = 1, drift: int = 0, start: int | None = 0) -> GroupSnapshot:
    """A share group as the poller builds it: the broker's lag, and as position log end - lag (+ `drift`: the log
    end read a moment after the coordinator's)."""
    assignment = (TP,)
    return GroupSnapshot(
        group_id="q",
        state="Stable" if members else "Empty",
        protocol_type="share",
        kind=GroupKind.SHARE,
        coordinator_id=1,
        members=tuple(Member(f"m{i}", f"c{i}", "/127.0.0.1", assignment, ("orders",)) for i in range(members)),
        committed={} if lag is None else {TP: CommittedOffset(end - lag + drift)},
        share_offsets={TP: ShareOffset(start, lag)},
    )


def run(polls: list[tuple[float, GroupSnapshot, int]]) -> Pipeline:
    p = Pipeline({**WINDOWS, **QUIET_LAG})
    for t, g, end in polls:
        p.step(snapshot(t, [g], {TP: end}))
    return p


def rules_sent(p: Pipeline) -> list[tuple[str, str]]:
    return [(n.kind.value, a.rule) for n in p.sent for a in n.alerts]


def test_a_hung_queue_consumer_is_stalled_though_its_position_drifts_under_production() -> None:
    # 50 records held unacknowledged, 100 arriving between polls: the lag grows by exactly what arrives, and the
    # position lagwatch derives moves back and forth by what arrives while it reads (0-2 records: 0.3 s of reads).
    polls = [(t, queue(50 + t * 7, 1000 + t * 7, drift=(t // 15) % 3), 1000 + t * 7) for t in range(0, 181, 15)]
    p = run(polls)
    assert p.firing() == {"stalled": "critical"}
    assert {rule for _, rule in rules_sent(p)} == {"stalled"}  # no rewind of a drifting position, nothing else
    summary = next(a for a in p.book.alerts.values()).summary
    assert "delivered nothing" in summary and "records wait" in summary


def test_a_hung_consumer_on_a_quiet_queue_is_stalled() -> None:
    p = run([(t, queue(7, 500), 500) for t in range(0, 181, 15)])
    assert p.firing() == {"stalled": "critical"}


def test_a_healthy_queue_with_records_always_in_flight_is_not_stalled() -> None:
    # 20 records a poll arrive and 20 are delivered; 1 to 4 are always in flight (acquired, not yet acknowledged).
    polls = []
    for i, t in enumerate(range(0, 601, 15)):
        end = 1000 + 20 * i
        lag = 1 + i % 4
        polls.append((t, queue(lag, end, drift=i % 2), end))
    p = run(polls)
    assert p.sent == [] and p.firing() == {}


def test_a_queue_drained_in_bursts_is_not_paged() -> None:
    # 300 records land every 5 minutes and are worked off within a minute; nothing waits in between.
    polls = []
    end = 0
    for t in range(0, 1801, 15):
        if t % 300 == 0:
            end += 300
        into = t % 300
        lag = max(0, 300 - 5 * into)
        polls.append((t, queue(lag, end), end))
    p = run(polls)
    assert p.sent == []


def test_an_empty_queue_with_records_waiting_is_stopped_once_the_window_passes() -> None:
    polls = [(t, queue(40, 400), 400) for t in range(0, 31, 15)]
    polls += [(t, queue(40 + t - 45, 400 + t - 45, members=0), 400 + t - 45) for t in range(45, 301, 15)]
    p = Pipeline({**WINDOWS, **QUIET_LAG})
    fired_at = None
    for t, g, end in polls:
        p.step(snapshot(t, [g], {TP: end}))
        if fired_at is None and "stopped" in p.firing():
            fired_at = t
    assert fired_at is not None and 45 + 120 <= fired_at <= 45 + 120 + 15
    assert {rule for _, rule in rules_sent(p)} == {"stopped"}


def test_an_empty_caught_up_queue_and_members_coming_and_going_page_nothing() -> None:
    polls = []
    end = 0
    for i, t in enumerate(range(0, 1201, 15)):
        end += 10
        members = 0 if (i // 2) % 3 == 0 else 2  # members leave for 30 s in every 90 and come back
        lag = 0 if members else 10
        polls.append((t, queue(lag, end, members=members), end))
    polls += [(t, queue(0, end, members=0), end) for t in range(1215, 1800, 15)]  # nobody, nothing waiting
    p = run(polls)
    assert p.sent == []


def test_a_queue_whose_broker_reports_no_lag_is_never_judged() -> None:
    # Kafka 4.1: start offsets only; log end - start offset is an upper bound (930 against a real 330), never paged.
    p = run([(t, queue(None, 1030, members=0, start=0), 1030) for t in range(0, 601, 15)])
    assert p.sent == [] and p.firing() == {}
    g = queue(None, 1030, start=100)
    from lagwatch.lag.share import LagSource, share_partitions
    from lagwatch.model import PartitionOffsets

    (row,) = share_partitions(g, {TP: PartitionOffsets(0, 1030)})
    assert (row.start_offset, row.lag, row.lag_source, row.members) == (100, 930, LagSource.ESTIMATED, 1)


def test_a_hung_queue_is_one_incident_though_slow_describes_make_its_position_jump() -> None:
    # Found on a loaded broker: DescribeShareGroupOffsets took 2.1-2.4 s, so the position (log end read after it,
    # minus the lag) ran 5 to 20 records ahead on slow polls, nothing delivered; `stalled` fired and resolved 5
    # times in 5 minutes, and `falling_behind` paged between.
    p = Pipeline({"stalled": {"window_s": 45}, "falling_behind": {"window_s": 60}, **QUIET_LAG})
    drift = [0, 0, 21, 0, 5, 0, 0, 24, 16, 0, 0, 26, 0, 3]  # records that arrived while a poll read (14 polls)
    true_position = 660
    for i in range(200):
        t, end = 3.0 * i, 1000 + 30 * i  # 10 records a second
        g = queue(end - true_position, end, drift=drift[i % len(drift)])
        p.step(snapshot(t, [g], {TP: end}))
    assert rules_sent(p) == [("firing", "stalled")] or {k for k, _ in rules_sent(p)} <= {"firing", "update"}
    assert [k for k, rule in rules_sent(p) if rule == "stalled" and k in ("firing", "resolved")] == ["firing"]
    assert "falling_behind" not in {rule for _, rule in rules_sent(p)}


def test_a_slow_job_queue_with_a_record_always_in_flight_is_not_stalled() -> None:
    # One record every 24.4 s, 25 s of work each: it keeps up, one record in flight, one waiting now and then.
    p = Pipeline({"stalled": {"window_s": 45}, "falling_behind": {"window_s": 60}, **QUIET_LAG})
    for i in range(400):
        t = 3.0 * i
        end = 1 + int(t / 24.4)
        done = int(t / 25.0)
        p.step(snapshot(t, [queue(max(1, end - done), end)], {TP: end}))
    assert p.sent == []


def test_a_stall_is_held_across_a_restart_while_its_queue_is_empty() -> None:
    # Its hung consumer left (max.poll.interval) while lagwatch was down: `stalled` resolved at the first poll after
    # the restart ("all clear", 300 records waiting), and `stopped` paged 50 s later.
    p = Pipeline({"stalled": {"window_s": 45}, "stopped": {"window_s": 45}, **QUIET_LAG}, max_gap_s=10)
    for i in range(40):
        p.step(snapshot(3.0 * i, [queue(300, 300)], {TP: 300}))
    assert p.firing() == {"stalled": "critical"}
    for i in range(40, 45):  # the hung member leaves; lagwatch stops 15 s later
        p.step(snapshot(3.0 * i, [queue(300, 300, members=0)], {TP: 300}))
    for i in range(40):  # 72 s down, back to a queue nobody consumes
        t = 204 + 3.0 * i
        p.step(snapshot(t, [queue(300, 300, members=0)], {TP: 300}))
    # `stalled` is held until `stopped` can judge, and resolves in the same notification that tells `stopped`.
    told = [({a.rule for a in n.firing}, {a.rule for a in n.alerts} - {a.rule for a in n.firing}) for n in p.sent]
    assert told == [({"stalled"}, set()), ({"stopped"}, {"stalled"})], told


def test_a_share_group_without_any_reported_lag_has_no_lag_not_zero() -> None:
    from lagwatch.lag import LagState, group_lag
    from lagwatch.model import PartitionOffsets

    empty = queue(None, 1030, members=0, start=100)
    lag = group_lag(empty, {TP: PartitionOffsets(0, 1030)})
    assert [(r.lag, r.state) for r in lag.partitions] == [(None, LagState.UNKNOWN)] and not lag.known
    assert group_lag(queue(50, 1030), {TP: PartitionOffsets(0, 1030)}).known
