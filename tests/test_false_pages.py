"""The situations in which a monitor pages for nothing, replayed through the daemon's own pipeline step: each must
raise no notification, while the real problems beside them are still caught within two polls of their rule.

Polls every 5 s, with millisecond jitter as real polls have. Rules tightened so that the scenarios stay short.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections.abc import Callable

import pytest

from lagwatch.history import ClusterHistory
from lagwatch.model import ClusterSnapshot, CommittedOffset, GroupKind, PartitionOffsets, TopicPartition
from lagwatch.offsets_topic import GroupMetadata, OffsetCommit
from tests.synthetic import TP, Pipeline, group, snapshot

RULES = {
    "lag": {"warning": {"offsets": 500}, "critical": {"offsets": 5000}, "for_s": 20},
    "stalled": {"window_s": 30},
    "stopped": {"window_s": 30},
    "falling_behind": {"window_s": 60},
    "rate_window_s": 60,
    "cluster_unreachable": {"for_s": 10},
}
ALERTS = {"group_wait_s": 0, "group_interval_s": 0}
INTERVAL = 5.0


def pipeline(**overrides: dict) -> Pipeline:  # type: ignore[type-arg]
    return Pipeline({**RULES, **overrides}, ALERTS, max_gap_s=2 * INTERVAL + 5)


def times(start: float, end: float, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [start + i * INTERVAL + rng.uniform(-0.002, 0.002) for i in range(int((end - start) / INTERVAL))]


def notified(p: Pipeline, group_id: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (n.kind, tuple(sorted(a.rule for a in n.alerts)))
        for n in p.sent
        if group_id is None or n.group_labels.get("group") == group_id
    ]


def test_first_start_among_empty_caught_up_groups_is_silent() -> None:
    p = pipeline()
    groups = [group(f"batch-{i}", committed={TP: 100}, state="Empty", members=0) for i in range(50)]
    for t in times(0, 300):
        p.step(snapshot(t, groups, {TP: 100}, retention_minutes=10))
    assert p.sent == []


def test_short_job_between_two_polls_is_silent() -> None:
    p = pipeline()
    for t in times(0, 60):
        p.step(snapshot(t, [], {TP: 100}, retention_minutes=10))
    done = group("nightly", committed={TP: 100}, state="Empty", members=0, kind=GroupKind.CLASSIC)
    for t in times(60, 300):
        p.step(snapshot(t, [done], {TP: 100}, retention_minutes=10))
    assert p.sent == []


def test_broker_outage_raises_only_the_cluster_alert() -> None:
    """A 45 s outage: the producer and the consumer pause with the broker, then a burst drains in a few polls.
    Rates and windows must not be computed across the gap."""
    p = pipeline()
    end, committed, t = 0, 0, 0.0
    for t in times(0, 120):
        end += 50
        committed = end - 10
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    for t in times(120, 165):
        p.step(snapshot(t, [], {}, error="connection refused"))
    # Back: the consumer rejoins; buffered records land at once and it needs a few polls to drain them.
    end += 2000
    for i, t in enumerate(times(165, 300)):
        end += 50
        committed = min(end - 10, committed + 50 + 800 * (i > 0))
        state, members = ("PreparingRebalance", 0) if i == 0 else ("Stable", 1)
        p.step(snapshot(t, [group(committed={TP: committed}, state=state, members=members)], {TP: end}))
    assert committed == end - 10  # drained
    assert notified(p, "g") == []
    assert notified(p) == [("firing", ("cluster_unreachable",)), ("resolved", ("cluster_unreachable",))]


def test_lagwatch_restart_gap_needs_fresh_evidence() -> None:
    """lagwatch was down for ten minutes while a consumer paused and came back: nothing is judged across the gap."""
    p = pipeline()
    end = 0
    for t in times(0, 100):
        end += 50
        p.step(snapshot(t, [group(committed={TP: end})], {TP: end}))
    committed = end
    end += 30_000  # produced while lagwatch was down; the consumer has nearly caught up since
    for i, t in enumerate(times(700, 800)):
        end += 50
        committed = end - max(0, 400 - i * 100)
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    assert p.sent == []


def test_sparse_bursts_are_not_a_stall() -> None:
    """Quiet for longer than the stalled window, then a burst the consumer drains within a poll or two."""
    p = pipeline()
    end = 100
    for cycle in range(4):
        for i, t in enumerate(times(cycle * 120, cycle * 120 + 120, seed=cycle)):
            if i == 0:
                end += 300  # a burst arrives just before this poll
                committed = end - 300
            else:
                committed = end
            p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    assert p.sent == []


def _keeping_up_for_90_s(p: Pipeline) -> int:
    """A consumer 20 records behind at every poll for 90 s, 100 arriving a poll: the log end at the last poll."""
    end = 0
    for t in times(0, 90):
        end += 100
        p.step(snapshot(t, [group(committed={TP: end - 20})], {TP: end}))
    return end


def test_stopped_consumer_is_one_incident_stopped_and_lag() -> None:
    p = pipeline()
    end = _keeping_up_for_90_s(p)
    committed = end - 20
    fired_at: dict[str, float] = {}
    for t in times(90, 300):
        end += 100
        p.step(snapshot(t, [group(committed={TP: committed}, state="Empty", members=0)], {TP: end}))
        for rule in p.firing():
            fired_at.setdefault(rule, t)
    rules = {r for kind, rs in notified(p, "g") if kind != "resolved" for r in rs}
    assert rules == {"stopped", "lag"}, notified(p, "g")
    assert fired_at["stopped"] - 90 <= 30 + 2 * INTERVAL  # the window, plus at most two polls
    crossed = 90 + 5 * INTERVAL  # lag 20 + 100 per poll reaches 500 after five polls, then `for` is 20 s
    assert fired_at["lag"] - crossed <= 20 + 2 * INTERVAL


def test_stopped_inhibits_falling_behind_and_stalled() -> None:
    """Configurable: with inhibition off, the same history notifies the extra rules (so inhibition is what hid
    them); by default only stopped reaches the receiver."""
    p = Pipeline({**RULES, "lag": {"enabled": False}}, {**ALERTS})
    q = Pipeline({**RULES, "lag": {"enabled": False}}, {**ALERTS, "inhibit_rules": []})
    for pipe in (p, q):
        pipe.book.apply(
            "c",
            [
                _finding("stopped"),
                _finding("falling_behind"),
            ],
            frozenset(),
            0.0,
        )
        pipe.sent += pipe.book.due(0.0)
    assert [r for _, rs in notified(p) for r in rs] == ["stopped"]
    assert sorted(r for _, rs in notified(q) for r in rs) == ["falling_behind", "stopped"]


def _finding(rule: str):  # type: ignore[no-untyped-def]
    from lagwatch.model import Finding

    return Finding(rule, "critical", "c", "g", {"cluster": "c", "group": "g"}, rule)


def test_falling_behind_not_on_a_late_jump_and_not_lost_to_an_uncommitted_partition() -> None:
    flat_then_jump = pipeline()
    end = 0
    for i, t in enumerate(times(0, 120)):
        end += 100
        lag = 50 if i < 20 else 2000  # flat, then one jump at the last poll
        flat_then_jump.step(snapshot(t, [group(committed={TP: end - lag})], {TP: end}))
    assert "falling_behind" not in {r for _, rs in notified(flat_then_jump) for r in rs}

    # Really falling behind (produces 100/poll, consumes 60/poll), with a second partition not yet committed.
    tp1 = TopicPartition("orders", 1)
    real = pipeline(lag={"enabled": False})
    end, committed, fired = 0, 0, None
    for t in times(0, 200):
        end += 100
        committed += 60
        g = group(committed={TP: committed}, assigned=(TP, tp1))
        real.step(snapshot(t, [g], {TP: end, tp1: 5}))
        if fired is None and "falling_behind" in real.firing():
            fired = t
    assert fired is not None and fired <= 60 + 2 * INTERVAL + 1


def test_for_is_not_one_poll_late_under_jitter() -> None:
    p = pipeline()
    fired = None
    for t in times(0, 60, seed=7):
        p.step(snapshot(t, [group(committed={TP: 0})], {TP: 1000}))
        if fired is None and "lag" in p.firing():
            fired = t
    assert fired is not None and abs(fired - 20) < 0.01


def test_exact_commit_times_keep_a_recommitting_quiet_consumer_unwarned() -> None:
    """A simple (assign) group on a quiet topic commits the same offset every minute. Polls cannot see that;
    the commit records in __consumer_offsets can."""
    p = pipeline(lag={"enabled": False})
    simple = [group("quiet", committed={TP: 10}, kind=GroupKind.SIMPLE, members=0, state="Empty")]
    for t in times(0, 1200):
        records = [OffsetCommit("quiet", "orders", 0, 10, None, "", int((t - 1) * 1000), None, 3)]
        p.step(snapshot(t, simple, {TP: 10}, retention_minutes=10), records, caught_up=True)
    assert p.sent == []
    # Without the records, the same history warns (once even the latest possible expiry is near).
    q = pipeline(lag={"enabled": False})
    for t in times(0, 1200):
        q.step(snapshot(t, simple, {TP: 10}, retention_minutes=10))
    assert [r for _, rs in notified(q) for r in rs][:1] == ["expiry"]


def test_exact_empty_time_from_group_metadata_warns_from_the_first_poll() -> None:
    """At first start, a group written Empty 8 minutes ago (retention 10 min) is known to expire in 2 minutes."""
    p = pipeline(lag={"enabled": False}, stopped={"enabled": False})
    now = 10_000.0
    records = [GroupMetadata("batch", "consumer", 3, None, None, int((now - 480) * 1000), (), 3)]
    p.step(
        snapshot(now, [group("batch", committed={TP: 5}, state="Empty", members=0)], {TP: 5}, retention_minutes=10),
        records,
        caught_up=True,
    )
    (alert,) = [a for a in p.book.alerts.values() if a.rule == "expiry"]
    assert alert.state == "firing" and alert.details["observed"] and alert.details["expires_at"] == now + 120


def _stuck_consumer_with_one_odd_poll(odd: str) -> Pipeline:
    """A consumer stuck for good (members there, committed frozen, records arriving), so stalled, lag and
    stopped-or-not alerts fire; at one poll part of the picture is missing, then everything is as before."""
    p = pipeline()
    end = 1000
    for i, t in enumerate(times(0, 400)):
        end += 50
        partitions = {TP: end}
        stuck = group("stuck", committed={TP: 100})
        if i == 40 and odd == "log end unread":  # ListOffsets answered an error for the partition
            snap = snapshot(t, [stuck], partitions)
            offsets = dict(snap.partitions)
            offsets[TP] = PartitionOffsets(None, None, error="OFFSET_NOT_AVAILABLE")
            p.step(dataclasses.replace(snap, partitions=offsets))
            continue
        if i == 40 and odd == "rebalance":  # caught between two generations: no members
            stuck = group("stuck", committed={TP: 100}, state="PreparingRebalance", members=0)
        p.step(snapshot(t, [stuck], partitions))
    return p


@pytest.mark.parametrize("odd", ["log end unread", "rebalance"])
def test_one_poll_with_part_of_the_picture_missing_resolves_nothing(odd: str) -> None:
    """One poll without the partition's log end (an election), or with the group mid-rebalance and no members:
    the stuck consumer's alerts resolved at that poll and paged again at the next, or a window later."""
    p = _stuck_consumer_with_one_odd_poll(odd)
    told = [(n.kind, sorted((a.rule, a.state) for a in n.alerts)) for n in p.sent]
    assert told == [("firing", [("lag", "firing")]), ("update", [("lag", "firing"), ("stalled", "firing")])], told
    assert {a.rule for a in p.book.alerts.values() if a.state == "firing"} >= {"lag", "stalled"}


def test_a_consumer_caught_up_below_a_transaction_marker_is_silent() -> None:
    """Transactions of 100 records and a commit marker, then the producer goes quiet. The consumer took every
    record: committed one below the log end, on the marker. Once the collector has found only markers above it
    (consumable_end), there is nothing to consume: no lag, no stall, and nothing lost when retention deletes
    the segments (log start at the log end). Before, stalled and lag paged, and below_log_start said a record
    was never consumed and is gone. A consumer really stuck beside it is still caught."""
    p = pipeline()
    end = 0
    for i, t in enumerate(times(0, 400)):
        if i < 10:
            end += 101
        done = group("done", committed={TP: end - 1})
        stuck = group("stuck", committed={TP: 50})
        snap = snapshot(t, [done, stuck], {TP: end}, starts={TP: end if i > 60 else 0})
        if i >= 11:  # the log idle since the last poll: the collector looked at the tail
            snap = dataclasses.replace(
                snap, partitions={TP: dataclasses.replace(snap.partitions[TP], consumable_end=end - 1)}
            )
        p.step(snap)
    assert notified(p, "done") == []
    assert {"lag", "stalled", "below_log_start"} <= {rule for _, rules in notified(p, "stuck") for rule in rules}


def test_records_seen_after_a_blind_spell_are_not_dated_back_into_it() -> None:
    """lagwatch is down for two hours while a topic is quiet; 20 s before it is back, 400 records land, which a
    healthy consumer drains in two minutes. Interpolated across the spell they looked up to 2 hours old: lag in
    seconds paged critical at once. They count from when lagwatch saw them (a lower bound), and nothing pages."""
    p = pipeline(lag={"warning": {"seconds": 300}, "critical": {"seconds": 900}, "for_s": 20})
    for t in times(0, 200):
        p.step(snapshot(t, [group("app", committed={TP: 1000})], {TP: 1000}))
    committed = 1000
    for t in times(7200, 7500):
        committed = min(1400, committed + 20)
        p.step(snapshot(t, [group("app", committed={TP: committed})], {TP: 1400}))
    assert p.sent == []


def test_a_cron_group_that_runs_between_polls_keeps_its_offsets_fresh() -> None:
    """A classic group run by a short job every 20 minutes joins, commits and leaves between two polls, so every
    poll sees it Empty, with its committed offset moved by each run. Kafka counts its offsets' expiry from the
    moment it last became Empty, after each run: they never come near a 60-minute retention. Counted from the
    first poll that saw it Empty, expiry paged warning then critical, 'at the latest'. An admin's reset (no
    leader epoch: no consumer read the records) leaves Kafka's clock, and lagwatch's, where they were."""

    def run(epoch: int | None) -> Pipeline:
        p = pipeline(lag={"enabled": False}, stopped={"enabled": False})
        end = committed = 0
        for i, t in enumerate(times(0, 2 * 3600)):
            end += 2
            if i % 240 == 120:  # the job ran (or the reset happened) between the last poll and this one
                committed = end
            cron = group("cron", state="Empty", members=0)
            cron = dataclasses.replace(cron, committed={TP: CommittedOffset(committed, epoch)})
            p.step(snapshot(t, [cron], {TP: end}, retention_minutes=60))
        return p

    assert run(epoch=3).sent == []
    assert {rule for _, rules in notified(run(epoch=None), "cron") for rule in rules} == {"expiry"}


def test_exact_clocks_still_catching_up_do_not_page_on_an_old_commit() -> None:
    """At start the __consumer_offsets reader reads a cleaned segment first: a simple group's commit of 6.5 days
    ago, its commits of the last minutes a batch later. A poll between the two saw only the old one: expiry paged
    critical at once (7-day retention) and resolved at the next poll. Until the reader has caught up, an exact
    clock is no earlier than what the polls saw."""
    p = pipeline()
    t0 = 1_700_000_000.0
    quiet = group("quiet", committed={TP: 10}, kind=GroupKind.SIMPLE, members=0, state="Empty")

    def commit(at: float) -> OffsetCommit:
        return OffsetCommit("quiet", "orders", 0, 10, None, "", int(at * 1000), None, 3)

    batches = [([commit(t0 - 6.5 * 86400)], False), ([commit(t0 + 30 - 60 * k) for k in range(100, 0, -1)], True)]
    for i, (records, caught_up) in enumerate([*batches, *[([], True)] * 5]):
        p.step(snapshot(t0 + 5 * i, [quiet], {TP: 10}), records, caught_up)
    assert p.sent == []


def test_a_topic_read_in_full_resolves_while_another_topic_of_the_group_is_unreadable() -> None:
    """Holding is scoped: while a partition of `orders` has no readable log end, the group's alerts on `orders`
    and its own stay as they are, but its lag alert on another topic, whose lag is gone, resolves."""
    p = pipeline()
    other = TopicPartition("other", 0)
    for i, t in enumerate(times(0, 200)):
        caught_up = i >= 20
        g = group("g", committed={TP: 100, other: 5000 if caught_up else 1000})
        snap = snapshot(t, [g], {TP: 100, other: 5000})
        if caught_up:  # from here on, orders-0's log end cannot be read
            snap = dataclasses.replace(
                snap, partitions={**snap.partitions, TP: PartitionOffsets(None, None, error="OFFSET_NOT_AVAILABLE")}
            )
        p.step(snap)
    told = [(n.kind, {(a.labels["topic"], a.state) for a in n.alerts}) for n in p.sent]
    assert told[0] == ("firing", {("other", "firing")}) and told[-1] == ("resolved", {("other", "resolved")}), told
    assert not [a for a in p.book.alerts.values() if a.state == "firing"]


def _sink_polls(
    p: Pipeline, start: int, end: int, stop_at: float | None = None, blind: tuple[int, int] = (0, 0)
) -> None:
    """A sink keeping up with 100 records/s that commits every 6 minutes (S3 sink, rotate.interval.ms=360000),
    polled every 30 s; from `stop_at` on it commits nothing more (members still there)."""
    for i in range(start, end):
        if blind[0] <= i < blind[1]:
            continue  # lagwatch down: no poll
        t = i * 30.0
        flushed = t if stop_at is None else min(t, stop_at)
        p.step(snapshot(t, [group("sink", committed={TP: int(100 * (flushed - flushed % 360))})], {TP: int(100 * t)}))


def test_a_sink_that_commits_every_six_minutes_is_not_stalled_and_its_real_stall_still_pages() -> None:
    """Under the 5-minute default window, a healthy sink that flushes every 6 minutes paged `stalled` critical
    every 6 minutes (and resolved a poll later). A partition's own commit cadence is learnt from the polls:
    `stalled` waits twice that, and a real stall still pages, 11 minutes after the sink's last commit."""
    p = Pipeline({"lag": {"enabled": False}})  # default stalled: window 5 minutes
    _sink_polls(p, 0, 240)  # two hours
    assert p.sent == []
    progress = p.history.groups["sink"].partitions[TP]
    assert progress.commit_cadence == 330.0  # records wait from the poll after a flush to the next: 11 polls
    _sink_polls(p, 240, 300, stop_at=7200.0)
    fired = [n.created_at for n in p.sent if any(a.rule == "stalled" and a.state == "firing" for a in n.alerts)]
    assert fired and all(n.kind != "resolved" for n in p.sent)
    assert 7200 + 660 <= fired[0] <= 7200 + 660 + 30, fired
    alert = next(a for a in p.book.alerts.values() if a.rule == "stalled")
    assert alert.details["commit_cadence_s"] == 330.0 and "commits about every 5m" in alert.summary


def test_the_cadence_is_each_partitions_and_counts_only_time_with_records_waiting() -> None:
    """Learnt per partition, from the time records waited, within unbroken observation:
    - a consumer of an hourly batch, which it drains within a poll, learns a cadence of one poll, not an hour
      (counting the hour since its last commit hid its hang for an hour); its stall pages at the window;
    - a group over a busy topic committed at every poll and a quiet one flushed every 6 minutes learns the quiet
      topic's cadence for the quiet topic (one cadence per group paged the quiet one every 6 minutes);
    - a wait across lagwatch's own downtime counts for nothing, and the waits are kept by a history save."""
    p = Pipeline()
    end = committed = 0
    for i in range(640):  # a batch of 100 records every hour, drained by the next poll; hung from poll 500
        if i % 120 == 0:
            end += 100
        if i < 500 and i % 120 == 1:
            committed = end
        p.step(snapshot(i * 30.0, [group("batch", committed={TP: committed})], {TP: end}))
    assert set(p.history.groups["batch"].partitions[TP].waits) == {30.0}
    fired = [n.created_at for n in p.sent if any(a.rule == "stalled" and a.state == "firing" for a in n.alerts)]
    assert fired and fired[0] == 600 * 30.0 + 300  # the batch of poll 600 waited the window: 5 minutes

    busy, quiet = TopicPartition("busy", 0), TopicPartition("quiet", 0)
    mixed = Pipeline({"lag": {"enabled": False}})
    for i in range(480):  # four hours
        t = i * 30.0
        flushed = int(10 * (t - t % 360))
        groups = [group("connect", committed={busy: int(100 * t), quiet: flushed}, subscribed=("busy", "quiet"))]
        mixed.step(snapshot(t, groups, {busy: int(100 * t) + 50, quiet: int(10 * t)}))
    assert [n for n in mixed.sent if any(a.rule == "stalled" for a in n.alerts)] == []
    partitions = mixed.history.groups["connect"].partitions
    assert partitions[busy].commit_cadence is None and partitions[quiet].commit_cadence == 330.0

    sink = Pipeline()
    _sink_polls(sink, 0, 120, blind=(30, 50))  # down for 10 minutes within the first hour
    waits = sink.history.groups["sink"].partitions[TP].waits
    assert waits and set(waits) == {330.0}, waits  # the wait across the blind spell is not in it
    loaded = ClusterHistory.from_json(json.loads(json.dumps(sink.history.to_json())))
    assert loaded.groups["sink"].partitions[TP].waits == waits
    learnt, kept = sink.history.groups["sink"].partitions[TP], loaded.groups["sink"].partitions[TP]
    assert learnt.longest_wait == 330.0 and (kept.longest_wait, kept.longest_wait_at) == (330.0, learnt.longest_wait_at)


def test_a_stall_of_one_staggered_partition_resolves_when_it_commits_again() -> None:
    """Twelve partitions flushed every 6 minutes, one after another; partition 0 hangs for 30 minutes. Its stall
    pages 11 minutes after its last flush and resolves at its first flush after, however the healthy partitions
    beside it stand in their own waits (a hold on the topic for any of them kept it firing for hours)."""
    tps = [TopicPartition("orders", k) for k in range(12)]
    p = Pipeline({"lag": {"enabled": False}, "falling_behind": {"enabled": False}})
    hang, back = 7200.0, 9000.0
    for i in range(400):
        t = i * 30.0
        committed = {}
        for k, tp in enumerate(tps):
            at = min(t, hang) if k == 0 and t < back else t
            committed[tp] = int(10 * (at - (at - k * 30) % 360)) if at >= k * 30 else 0
        p.step(snapshot(t, [group(committed=committed)], dict.fromkeys(tps, int(10 * t))))
    told = [(n.kind, n.created_at) for n in p.sent]
    assert [kind for kind, _ in told] == ["firing", "resolved"], told
    assert hang <= told[0][1] - 660 <= hang + 360 and told[1][1] == back


def test_hangs_of_a_consumer_that_commits_at_every_poll_are_not_learnt_and_page_at_the_window_each_time() -> None:
    """A consumer that commits at every poll hangs for 40 minutes three times: each hang was learnt as its cadence,
    and the fourth paged after 20 minutes, not 5. A wait is learnt only after a commit that itself ended a wait
    longer than a poll: a sink's, not a busy consumer's hang. A poll that did not read the log end in a sink's
    wait is bridged (taken as the end of the run, it cut an 8-minute wait to 30 s: a page every cycle)."""
    p = Pipeline({"lag": {"enabled": False}, "falling_behind": {"enabled": False}})
    committed, paged_after = 0, []
    for i in range(4 * 360):
        t = i * 30.0
        hung = any(h <= t < h + 2400 for h in (7200, 18000, 28800, 39600))
        committed = committed if hung else int(100 * t)
        before = len(p.sent)
        p.step(snapshot(t, [group("busy", committed={TP: committed})], {TP: int(100 * t) + 50}))
        if any(a.rule == "stalled" and a.state == "firing" for n in p.sent[before:] for a in n.alerts):
            paged_after.append(t - max(h for h in (7200, 18000, 28800, 39600) if h <= t))
    assert paged_after and all(after <= 330 for after in paged_after), paged_after
    assert len(paged_after) == 4 and p.history.groups["busy"].partitions[TP].waits == ()

    sink = Pipeline({"lag": {"enabled": False}})
    for i in range(720):  # six hours of a sink that flushes every 8 minutes; the log end unread once a cycle
        t = i * 30.0
        offsets = PartitionOffsets(0, None if t % 480 == 420 else int(10 * t))
        snap = dataclasses.replace(
            snapshot(t, [group("sink", committed={TP: int(10 * (t - t % 480))})], {}), partitions={TP: offsets}
        )
        sink.step(snap)
    assert sink.history.groups["sink"].partitions[TP].commit_cadence == 450.0
    assert [n for n in sink.sent if any(a.rule == "stalled" for a in n.alerts)] == []


def _busy_consumer_hangs(p: Pipeline, hangs: list[tuple[float, float]], polls: int) -> dict[tuple[float, float], float]:
    """A consumer committing at every poll (100 records/s), hung (members there) within each of `hangs`: how long
    after each hang began `stalled` was up."""
    committed, paged = 0, {}
    for i in range(polls):
        t = i * 30.0
        hung = next((h for h in hangs if h[0] <= t < h[1]), None)
        committed = committed if hung else int(100 * (t - 10))
        p.step(snapshot(t, [group("busy", committed={TP: committed})], {TP: int(100 * t)}))
        if hung and hung not in paged and any(a.rule == "stalled" for a in p.book.alerts.values()):
            paged[hung] = t - hung[0]
    return paged


def test_a_quiet_topics_sink_a_rehanging_consumer_and_a_sink_that_commits_twice_per_flush() -> None:
    """Three cases of the third review:
    - a sink that flushes every 10 minutes on a quiet topic (a record every ~7 minutes): waits of 1-10 minutes,
      whose middle one paged a record that had waited 6 when compared with the time since the last commit (idle
      time in it). `stalled` compares the time records have waited with twice the longest wait: no page;
    - a busy consumer that hangs for 20 minutes, gets through one batch after a restart, and hangs again, three
      times: no hang is learnt (longer than twice the window: they paged), each pages at the window;
    - a sink flushing every 6 minutes (+-60 s) with a second commit a poll after each flush learns its cadence."""
    import random

    rnd = random.Random(7)
    arrivals, t = [], 0.0
    while t < 12 * 3600:
        t += rnd.expovariate(1 / 420)
        arrivals.append(t)
    quiet, committed = Pipeline(), 0
    for i in range(12 * 120):
        t = i * 30.0
        end = sum(1 for a in arrivals if a <= t)
        committed = end if t % 600 == 0 else committed
        quiet.step(snapshot(t, [group("s3", committed={TP: committed})], {TP: end}))
    assert [n for n in quiet.sent if any(a.rule == "stalled" for a in n.alerts)] == []
    assert (quiet.history.groups["s3"].partitions[TP].commit_cadence or 0) > 300

    hangs = [(7200.0 + 1230 * k, 7200.0 + 1230 * k + 1200) for k in range(3)] + [(11000.0, 1e9)]
    paged = _busy_consumer_hangs(Pipeline({"lag": {"enabled": False}}), hangs, 420)
    assert len(paged) == 4 and max(paged.values()) <= 330, paged

    rnd = random.Random(3)
    flushes, t = [], 0.0
    while t < 12 * 3600:
        t += 360 + rnd.uniform(-60, 60)
        flushes += [t, t + 30]
    double = Pipeline({"lag": {"enabled": False}})
    for i in range(12 * 120):
        t = i * 30.0
        done = [f for f in flushes if f <= t]
        double.step(snapshot(t, [group("sink", committed={TP: int(10 * done[-1]) if done else 0})], {TP: int(10 * t)}))
    assert double.history.groups["sink"].partitions[TP].commit_cadence is not None
    assert [n for n in double.sent if any(a.rule == "stalled" for a in n.alerts)] == []


def test_stalls_are_not_learnt_an_old_cadence_ages_and_a_poll_without_the_commit_says_nothing() -> None:
    """The fourth review:
    - a consumer that commits at every poll and hangs for 8 minutes every 40 learnt its hangs (each paged) and
      then hid them: waits are learnt only where at most two commits a poll apart came between them (a sink);
    - a cadence learnt and never renewed (a sink that became a consumer committing at every poll) held its hangs
      back for good: it pages at the window once no wait was learnt for an hour;
    - a poll whose OffsetFetch answer left the partition out restarted a hung consumer's clock (one every 4
      minutes hid the hang), and resolved a firing stall: the polls around it judge, and its clock stays."""
    busy = Pipeline({"lag": {"enabled": False}})
    paged = _busy_consumer_hangs(busy, [(13200.0 + 2400 * k, 13200.0 + 2400 * k + 480) for k in range(3)], 720)
    assert len(paged) == 3 and max(paged.values()) <= 330 and busy.history.groups["busy"].partitions[TP].waits == ()

    former_sink = Pipeline({"lag": {"enabled": False}})
    _sink_polls(former_sink, 0, 240)  # two hours of 6-minute flushes: cadence learnt
    assert former_sink.history.groups["sink"].partitions[TP].commit_cadence == 330.0
    fired = None
    for i in range(240, 480):  # then it commits at every poll, and hangs at 3 h
        t = i * 30.0
        done = min(t, 10800.0)
        former_sink.step(snapshot(t, [group("sink", committed={TP: int(100 * done)})], {TP: int(100 * t) + 50}))
        if fired is None and any(a.rule == "stalled" for a in former_sink.book.alerts.values()):
            fired = t
    assert fired is not None and fired - 10800 <= 330

    flaky = Pipeline({"lag": {"enabled": False}})
    for i in range(360):  # hangs at 2 h; every 8th poll leaves the partition's commit out
        t = i * 30.0
        committed = {} if i % 8 == 0 and i > 200 else {TP: int(100 * min(t, 7200.0))}
        flaky.step(snapshot(t, [group("flaky", committed=committed, assigned=(TP,))], {TP: int(100 * t) + 50}))
    told = [(n.kind, n.created_at) for n in flaky.sent if any(a.rule == "stalled" for a in n.alerts)]
    assert told and told[0][0] == "firing" and told[0][1] - 7200 <= 360
    assert [kind for kind, _ in told] == ["firing"], told  # and no resolve at the polls without the commit


def test_a_batch_consumer_an_idle_sink_a_recreated_topic_and_a_wait_of_twice_the_window() -> None:
    """The fifth review:
    - a consumer that wakes every 9 minutes and commits at each poll for 2.5 minutes learnt nothing (its burst
      of commits a poll apart counted as a busy consumer's) and paged every cycle: a burst that short is not;
    - a sink whose topic is idle for more than an hour kept no cadence (it aged by time) and paged the first
      flush after: a cadence is forgotten only after an hour of commits a poll apart;
    - a topic deleted and made again under an assigned group: the new topic's first commit was compared with
      the old topic's last and reported as a rewind;
    - a sink flushing every 10.5 minutes waits exactly twice the window: learnt."""
    batch, end, committed = Pipeline({"lag": {"enabled": False}}), 0, 0
    for i in range(720):
        end += 30
        phase = i % 18
        if phase < 5:
            committed = end - 30 * (4 - phase) if phase < 4 else end
        batch.step(snapshot(i * 30.0, [group("batch", committed={TP: committed})], {TP: end}))
    assert batch.history.groups["batch"].partitions[TP].commit_cadence == 390.0
    assert [n for n in batch.sent if any(a.rule == "stalled" for a in n.alerts)] == []

    idle = Pipeline({"lag": {"enabled": False}})
    end = committed = 0
    for i in range(960):  # 6-minute flushes for 2 h, then an idle topic for 2 h, then records again, twice
        t = i * 30.0
        if (i // 240) % 2 == 0:
            end += 100
        if t % 360 == 0:
            committed = end
        idle.step(snapshot(t, [group("sink", committed={TP: committed})], {TP: end}))
    assert [n for n in idle.sent if any(a.rule == "stalled" for a in n.alerts)] == []

    recreated, end = Pipeline(), 4000
    for i in range(20):
        t = i * 30.0
        if i < 10:
            end += 100
            recreated.step(snapshot(t, [group(committed={TP: end})], {TP: end}))
        elif i == 10:  # deleted: no commit for it any more, still in the member's assignment
            recreated.step(snapshot(t, [group(committed={}, assigned=(TP,))], {}))
        else:
            end = 20 * (i - 10)
            recreated.step(snapshot(t, [group(committed={TP: end})], {TP: end}))
    assert recreated.history.groups["g"].rewinds == {} and not recreated.sent

    edge = Pipeline({"lag": {"enabled": False}})
    for i in range(1440):
        t = i * 30.0
        edge.step(snapshot(t, [group("sink", committed={TP: int(10 * (t - t % 630))})], {TP: int(10 * t)}))
    assert edge.history.groups["sink"].partitions[TP].commit_cadence == 600.0
    assert len([n for n in edge.sent if any(a.rule == "stalled" for a in n.alerts)]) <= 2  # the first hour


def test_a_poll_without_a_partitions_commit_resolves_nothing() -> None:
    """A consumer stuck (members there, records arriving) pages `lag`; one poll's OffsetFetch answer leaves the
    partition out (a partition-level error). That poll resolved the lag alert, and the next paged it again."""
    p = Pipeline({"lag": {"warning": {"offsets": 1000}, "for_s": 0}, "stalled": {"enabled": False}})
    for i in range(40):
        t = i * 30.0
        committed = {} if i == 30 else {TP: 100}
        p.step(snapshot(t, [group(committed=committed, assigned=(TP,))], {TP: 2000 + 100 * i}))
    assert [n.kind for n in p.sent] == ["firing"], [(n.kind, n.created_at) for n in p.sent]


def test_a_poll_without_one_partitions_commit_does_not_ease_a_critical_lag() -> None:
    """A topic of two partitions, one far behind (critical on the topic's sum), one a little: one poll's
    OffsetFetch answer leaves the far one out. The rest said warning, and the alert eased to warning at that poll
    and went back to critical at the next: two false updates."""
    second = TopicPartition("orders", 1)
    p = Pipeline(
        {
            "lag": {"warning": {"offsets": 1000}, "critical": {"offsets": 10000}, "for_s": 0},
            "stalled": {"enabled": False},
        }
    )
    for i in range(40):
        t = i * 30.0
        committed = {second: 100} if i == 30 else {TP: 100, second: 100}
        ends = {TP: 20000 + 100 * i, second: 2000 + 100 * i}
        p.step(snapshot(t, [group(committed=committed, assigned=(TP, second))], ends))
    assert [(n.kind, n.severity_text) for n in p.sent] == [("firing", "critical")], [
        (n.kind, n.severity_text, n.created_at) for n in p.sent
    ]
    (lag,) = [a for a in p.book.alerts.values() if a.rule == "lag"]
    assert lag.severity == "critical"


def test_one_failed_poll_in_three_still_pages_a_hang() -> None:
    """A flaky cluster: one poll in three times out, and a busy consumer hangs for good at 1 h. Each failed poll
    restarted the evidence (no 5-minute window was ever covered) and dropped the pending `lag` alert (its 2-minute
    `for` never ran out): nothing was notified for 3 hours, not even cluster_unreachable (never three failures in
    a row). A failed poll within max_gap_s is no blind spell now, and pending alerts wait through it."""
    p = Pipeline({}, {"group_wait_s": 30}, max_gap_s=90)
    end, committed = 0, 0
    for i in range(4 * 120):
        t = i * 30.0
        end += 3000
        if t < 3600:
            committed = end - 500
        if i % 3 == 2:
            p.step(snapshot(t, [], {}, error="request timed out"))
        else:
            p.step(snapshot(t, [group("orders-app", committed={TP: committed})], {TP: end}))
    first = {}
    for n in p.sent:
        for a in n.alerts:
            first.setdefault(a.rule, n.created_at)
    assert set(first) == {"stalled", "lag"}, first
    assert first["stalled"] - 3600 <= 7 * 60  # its 5-minute window, and a poll or two
    assert first["lag"] - 3600 <= 12 * 60  # 300 s behind, then its 2-minute `for`


def test_polls_without_the_log_end_in_every_window_still_page_a_hang() -> None:
    """A busy consumer hangs for good at 1 h while one poll in eight cannot read the partition's log end (leader
    elections of a rolling restart). Every window held such a poll, and each held the stall instead of being
    bridged: `stalled` never fired."""
    p = Pipeline({"lag": {"enabled": False}}, {"group_wait_s": 30}, max_gap_s=90)
    end, committed = 0, 0
    for i in range(240):
        t = i * 30.0
        end += 3000
        if t < 3600:
            committed = end - 200
        snap = snapshot(t, [group("app", committed={TP: committed})], {TP: end})
        if i % 8 == 0:
            snap = dataclasses.replace(snap, partitions={TP: PartitionOffsets(None, None, error="NOT_LEADER")})
        p.step(snap)
    fired = [n.created_at for n in p.sent if n.kind == "firing"]
    assert fired and fired[0] - 3600 <= 6 * 60, [(n.kind, n.created_at) for n in p.sent]


def _unread(snap: ClusterSnapshot, *tps: TopicPartition) -> ClusterSnapshot:
    offsets = dict(snap.partitions)
    for tp in tps:
        offsets[tp] = PartitionOffsets(None, None, error="LEADER_NOT_AVAILABLE")
    return dataclasses.replace(snap, partitions=offsets)


@pytest.mark.parametrize("landed_after_read", [0, 750])
def test_a_partition_without_a_leader_for_hours_does_not_keep_a_drained_topics_lag_alert(
    landed_after_read: int,
) -> None:
    """A topic of two partitions lags critical; the second, caught up, loses its leader for 5 hours (nothing can be
    produced to it). The consumer drains the first. The unread partition's lag counted for nothing, and held the
    topic's alert: critical for the whole 5 hours, with repeats. It counts as caught up now. On a busy topic
    (750 records landed after the last read, then the leader went, and the consumer committed them) a commit
    past the last log end read was not taken as caught up either."""
    second = TopicPartition("orders", 1)
    p = Pipeline({"lag": {"warning": {"offsets": 1000}, "critical": {"offsets": 10000}, "for_s": 0}}, max_gap_s=90)
    for i in range(700):
        t = i * 30.0
        backlog = 50000 if i < 100 else max(0, 50000 - 2000 * (i - 100))
        offline = 110 <= i < 110 + 600
        last = 500 + landed_after_read if i >= 110 else 500
        snap = snapshot(t, [group(committed={TP: 100000 - backlog, second: last}, assigned=(TP, second))],
                        {TP: 100000, second: last})  # fmt: skip
        p.step(_unread(snap, second) if offline else snap)
        if i == 200:
            assert p.firing() == {}, p.firing()  # drained at poll 125, its leader still gone
    assert [(n.kind, n.severity_text) for n in p.sent][-1] == ("resolved", "resolved")
    assert all(n.created_at <= 130 * 30 for n in p.sent), [(n.kind, n.severity_text, n.created_at) for n in p.sent]


def test_a_crash_looping_consumer_is_one_stall_not_one_per_restart() -> None:
    """A consumer crash-loops on a poison record from 30 min on: it never commits again, and one poll in three
    sees the group Empty (between a crash and the restart). At each Empty poll the stall resolved, and it fired
    again at the next: 16 notifications in 90 minutes with the default timing."""
    p = Pipeline({"lag": {"enabled": False}}, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    end = committed = 0
    for i in range(240):
        t = i * 30.0
        end += 3000
        if t < 1800:
            committed = end - 100
            g = group("app", committed={TP: committed})
        elif i % 3 == 0:
            g = group("app", committed={TP: committed}, state="Empty", members=0)
        else:
            g = group("app", committed={TP: committed})
        p.step(snapshot(t, [g], {TP: end}))
    assert [n.kind for n in p.sent] == ["firing"], [(n.kind, n.created_at) for n in p.sent]
    assert p.firing() == {"stalled": "critical"}


def test_a_consumer_gone_for_good_resolves_its_stall_and_is_stopped() -> None:
    """The hold through Empty polls lasts less than the window: a group whose members left for good has its
    stall resolved, and `stopped` tells the story."""
    p = Pipeline({"lag": {"enabled": False}}, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    end = committed = 0
    for i in range(200):
        t = i * 30.0
        end += 3000
        if t < 1800:
            committed = end - 100
        members = 0 if t >= 4800 else 1
        state = "Empty" if members == 0 else "Stable"
        p.step(snapshot(t, [group("app", committed={TP: committed}, state=state, members=members)], {TP: end}))
    assert p.firing() == {"stopped": "critical"}  # the stall resolved (inhibited by `stopped` meanwhile)
    assert [(n.kind, [a.rule for a in n.firing]) for n in p.sent] == [
        ("firing", ["stalled"]),
        ("update", ["stopped"]),
    ]


def test_a_poll_mid_rebalance_without_an_old_quiet_commit_is_no_expiry() -> None:
    """A Stable group subscribed to two topics, one quiet (its offset committed 9 days ago: Kafka keeps it, the
    topic is subscribed). One poll lands mid-rebalance (members, no assignment yet) and its OffsetFetch answer
    leaves that partition out. The offset counted as vanished when due: `expired` critical at that poll."""
    audit = TopicPartition("audit", 0)
    p = Pipeline({}, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    t0 = 1_700_000_000.0
    old = OffsetCommit("app", "audit", 0, 500, None, "", int((t0 - 9 * 86400) * 1000), None, 3)
    end = 0
    for i in range(60):
        t = t0 + i * 30.0
        end += 3000
        g = group("app", committed={TP: end - 100, audit: 500}, subscribed=("orders", "audit"))
        if i == 30:
            g = group("app", committed={TP: end - 100}, state="CompletingRebalance", subscribed=("orders", "audit"),
                      assigned=())  # fmt: skip
        p.step(snapshot(t, [g], {TP: end, audit: 500}), [old] if i == 0 else [], caught_up=True)
    assert p.sent == [], [(n.kind, [a.rule for a in n.alerts]) for n in p.sent]


def _daemon_like(rules: dict) -> Pipeline:  # type: ignore[type-arg]
    """30 s polls, the gap and the rings as the daemon sizes them."""
    from lagwatch.history import polls_to_keep
    from lagwatch.rules import RulesConfig

    p = Pipeline(rules, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    p.history.keep = polls_to_keep(RulesConfig.model_validate(rules).longest_history_s(), 30.0)
    return p


def test_a_sink_that_flushes_by_size_by_day_and_by_time_at_night_is_not_paged_each_night() -> None:
    """flush.size 20000 and a 9-minute time rotation: by day (100 records/s) a flush every 200 s, at night (5/s)
    every 9 minutes. Five short day waits made the cadence the window's, and each night's first 9-minute flush
    paged `stalled` critical (3 pages in 3 days). The longest wait is kept a day beside the latest ones."""
    p = _daemon_like({"lag": {"enabled": False}})
    end, committed, opened = 0.0, 0, 0.0
    for i in range(3 * 24 * 120):
        t = i * 30.0
        end += (100 if 7 <= (t / 3600) % 24 < 23 else 5) * 30
        if end - committed >= 20000 or t - opened >= 540:
            committed, opened = int(end), t
        p.step(snapshot(t, [group("s3-sink", committed={TP: committed})], {TP: int(end)}))
    assert [n.created_at for n in p.sent] == []


def test_a_sinks_rarely_written_partitions_borrow_the_cadence_of_its_busy_ones() -> None:
    """A sink flushes 12 partitions every 6 minutes; six get a record every 20 minutes or so. Their own waits are
    too few to know after the first hour, or shorter than the flush interval (a record lands anywhere in it):
    `stalled` paged them at the bare window. The longest cadence of the group's partitions of the topic counts."""
    rnd = random.Random(11)
    tps = [TopicPartition("orders", k) for k in range(12)]
    arrivals = {}
    for tp in tps[6:]:
        t, times_ = 0.0, []
        while t < 24 * 3600:
            t += rnd.expovariate(1 / 1200)
            times_.append(t)
        arrivals[tp] = times_
    p = _daemon_like({"lag": {"enabled": False}, "falling_behind": {"enabled": False}})
    ends = dict.fromkeys(tps, 0)
    committed = dict.fromkeys(tps, 0)
    for i in range(24 * 120):
        t = i * 30.0
        for tp in tps[:6]:
            ends[tp] = int(10 * t)
        for tp in tps[6:]:
            ends[tp] = sum(1 for x in arrivals[tp] if x <= t)
        if t % 360 == 0:
            committed = dict(ends)
        p.step(snapshot(t, [group("s3-sink", committed=dict(committed))], dict(ends)))
    assert [(n.created_at, [a.details.get("partitions") for a in n.alerts]) for n in p.sent] == []


def test_a_batch_consumers_recurring_hangs_each_page() -> None:
    """A consumer that commits every 2 minutes hangs 7 minutes every 3 hours: each hang pages. A hang that paged
    is not kept as the day's longest wait: kept, it made the next hangs that day page 17 minutes late, or not at
    all (1 page in 16 hangs)."""
    p = _daemon_like({"lag": {"enabled": False}})
    end = committed = 0
    hangs = [3600.0 + k * 3 * 3600 for k in range(8)]
    for i in range(int(25 * 3600 / 30)):
        t = i * 30.0
        end += 3000
        if not any(h <= t < h + 420 for h in hangs) and t % 120 == 0:
            committed = end
        p.step(snapshot(t, [group("batch", committed={TP: committed})], {TP: end}))
    firings = [n.created_at for n in p.sent if n.kind == "firing"]
    assert len(firings) == len(hangs)
    assert all(0 < at - h <= 6 * 60 for at, h in zip(firings, hangs, strict=True)), firings


def test_a_hang_of_a_sinks_busy_partition_pages_at_the_window_whatever_its_siblings_cadence() -> None:
    """A sink's busy partition commits at every poll, its quiet sibling is flushed every 9 minutes. The task hangs:
    the busy partition borrowed the sibling's cadence and paged 15 minutes after the hang, not 5."""
    busy, quiet = TopicPartition("orders", 0), TopicPartition("orders", 1)
    hang = 3 * 3600.0 + 30
    p = _daemon_like({"lag": {"enabled": False}})
    ends = {busy: 0, quiet: 0}
    committed = {busy: 0, quiet: 0}
    for i in range(int((hang + 1800) / 30)):
        t = i * 30.0
        ends[busy] += 3000
        ends[quiet] += 1 if i % 2 == 0 else 0
        if t < hang:
            committed[busy] = ends[busy] - 50
            if t % 540 == 0:
                committed[quiet] = ends[quiet]
        p.step(snapshot(t, [group("s3", committed=dict(committed), assigned=(busy, quiet))], dict(ends)))
    (first,) = [n for n in p.sent if n.kind == "firing"]
    assert first.created_at - hang <= 5.5 * 60, first.created_at - hang
    assert first.alerts[0].details["partitions"] == [0]


def test_a_consumer_a_little_behind_on_a_partition_without_a_leader_is_not_paged() -> None:
    """A healthy consumer about 100 records behind at each poll; one partition loses its leader for an hour (nobody
    can produce or fetch: the commit stays). Bridged and counted with its last log end, that partition paged the
    consumer `stalled` critical, then `lag`. It stays unknown: the consumer is not the story."""
    second = TopicPartition("orders", 1)
    p = _daemon_like({})
    ends = {TP: 0, second: 0}
    first = 0
    for i in range(480):
        t = i * 30.0
        offline = 7200 <= t < 10800
        if not offline:
            ends[TP] += 3000
            first = ends[TP] - 100
        ends[second] += 3000
        snap = snapshot(t, [group("app", committed={TP: first, second: ends[second] - 100}, assigned=(TP, second))],
                        dict(ends))  # fmt: skip
        p.step(_unread(snap, TP) if offline else snap)
    assert p.sent == [], [(n.kind, [a.rule for a in n.alerts], n.created_at) for n in p.sent]


def test_a_consumer_passing_a_stale_log_end_does_not_resolve_a_real_lag() -> None:
    """lagwatch cannot read a live leader's log end for an hour while producers write and a consumer 30 minutes
    behind catches up: the stale log end said lag 0 (and, at the poll the commit passed it, resolved the alert)."""
    p = _daemon_like({})
    end = committed = 0
    for i in range(240):
        t = i * 30.0
        end += 3000
        if t >= 3000:
            committed = min(end, committed + 4500)
        snap = snapshot(t, [group("app", committed={TP: committed})], {TP: end})
        p.step(_unread(snap, TP) if 3600 <= t < 7200 else snap)
        if 3600 <= t < 7200:
            assert "lag" in p.firing(), t  # held as it was: never resolved while it cannot be read


def test_a_crash_loop_with_kubernetes_back_off_is_one_stopped_incident() -> None:
    """A consumer stuck on a poison record: up 105 s, Empty 285 s (back-off), for 3 hours. Each Empty spell longer
    than `stopped`'s window fired it, each restart resolved it: 33 notifications. A firing `stopped` is held while
    members come back without committing."""
    p = _daemon_like({})
    end = 0
    for i in range(360):
        t = i * 30.0
        end += 3000
        if (t % 390) < 105:
            g = group("app", committed={TP: 1000}, assigned=(TP,))
        else:
            g = group("app", committed={TP: 1000}, state="Empty", members=0)
        p.step(snapshot(t, [g], {TP: end}))
    stopped = [n.kind for n in p.sent if any(a.rule == "stopped" for a in n.alerts)]
    assert len(p.sent) <= 4 and "resolved" not in stopped, [(n.kind, n.created_at) for n in p.sent]


def test_a_restart_does_not_bring_back_a_forgotten_cadence() -> None:
    """A sink flushed every 8 minutes for 3 hours, then committed at every poll: after an hour its cadence is
    forgotten. lagwatch restarts at 5 h; the consumer hangs at 5 h 20. The save had not kept when its run of commits
    a poll apart began, so the old cadence held the hang back: paged 14.5 minutes after it, not 5."""
    hang = 5 * 3600 + 1200.0
    p = _daemon_like({"lag": {"enabled": False}})
    end = committed = 0
    t = 0.0
    while t < hang + 1800:
        end += 3000
        if t < 3 * 3600:
            if t % 480 == 0:
                committed = end
        elif t < hang:
            committed = end - 100
        if t == 5 * 3600:  # restarted: the history saved and loaded, a minute down
            restored = ClusterHistory.from_json(json.loads(json.dumps(p.history.to_json())))
            restored.max_gap_s, restored.keep = p.history.max_gap_s, p.history.keep
            p.history = p.pipeline.history = restored
            restored.stall_window_of = p.pipeline._stall_window
            t += 60
            continue
        p.step(snapshot(t, [group("sink", committed={TP: committed})], {TP: end}))
        t += 30
    fired = [n.created_at for n in p.sent if n.kind == "firing" and n.created_at > hang]
    assert fired and fired[0] - hang <= 5.5 * 60, [(n.kind, n.created_at - hang) for n in p.sent]


def test_members_back_and_committing_resolve_stopped_while_a_partition_has_no_leader() -> None:
    """A broker dies for 2 hours with a partition the group lags on; the consumers crash with it (stopped fires),
    and come back 10 minutes later, consuming the other partition. The unread partition held the group's own
    alerts: stopped stayed firing (and inhibited the rest) for the 2 hours."""
    second = TopicPartition("orders", 1)
    p = _daemon_like({})
    ends = {TP: 200000, second: 200000}
    committed = {TP: 0, second: 0}
    for i in range(int(3 * 3600 / 30)):
        t = i * 30.0
        down = 1200 <= t < 1200 + 7200
        ends[TP] += 3000
        if not down:
            ends[second] += 3000
        if t < 1200:
            committed = {TP: ends[TP] - 300, second: ends[second] - 50000}
            g = group("app", committed=dict(committed), assigned=(TP, second))
        elif t < 1800:
            g = group("app", committed=dict(committed), state="Empty", members=0)
        else:
            committed[TP] = min(ends[TP] - 300, committed[TP] + 9000)
            g = group("app", committed=dict(committed), assigned=(TP, second))
        snap = snapshot(t, [g], dict(ends))
        p.step(_unread(snap, second) if down else snap)
        if t == 2400:
            assert "stopped" not in p.firing(), t


def test_a_crash_loop_that_commits_a_little_each_run_is_one_stopped_incident() -> None:
    """Up 105 s (committing for a minute, then an OOM), Empty 285 s, for 3 hours: stopped fired at each Empty
    spell and resolved at each run's first commit (24 transitions, the pager told each time)."""
    p = _daemon_like({})
    end = committed = 0
    for i in range(360):
        t = i * 30.0
        end += 3000
        phase = t % 390
        if phase < 60:
            committed = min(end, committed + 3000)
        if phase < 105:
            g = group("app", committed={TP: committed}, assigned=(TP,))
        else:
            g = group("app", committed={TP: committed}, state="Empty", members=0)
        p.step(snapshot(t, [g], {TP: end}))
    stopped = [a.state for n in p.sent for a in n.alerts if a.rule == "stopped"]
    assert "resolved" not in stopped and stopped.count("firing") >= 1, [(n.kind, n.created_at) for n in p.sent]


def test_falling_behind_is_held_through_a_poll_without_the_log_end() -> None:
    """A consumer slower than its producer on one partition; the log end is unread at one poll (an election):
    falling_behind resolved at that poll and fired again ten minutes later, twice."""
    p = _daemon_like({"lag": {"enabled": False}, "stalled": {"enabled": False}})
    end = committed = 0
    for i in range(240):
        t = i * 30.0
        end += 3000
        committed += 2400
        snap = snapshot(t, [group("app", committed={TP: committed})], {TP: end})
        p.step(_unread(snap, TP) if i in (120, 180) else snap)
    assert [n.kind for n in p.sent] == ["firing"], [(n.kind, n.created_at) for n in p.sent]


def test_a_crash_loop_with_long_runs_is_one_stopped_incident() -> None:
    """Runs of 4 to 7 minutes committing slower than the producer, then 5 minutes Empty (back-off at its cap):
    `stopped` fired and resolved at nearly every cycle (27 to 32 transitions in 3 hours)."""
    for run_s in (270, 420):
        p = _daemon_like({})
        end = committed = 0
        for i in range(360):
            t = i * 30.0
            end += 3000
            up = (t % (run_s + 45 + 300)) < run_s + 45
            if up:
                committed = min(end, committed + 2000)
                g = group("app", committed={TP: committed}, assigned=(TP,))
            else:
                g = group("app", committed={TP: committed}, state="Empty", members=0)
            p.step(snapshot(t, [g], {TP: end}))
        stopped = [a.state for n in p.sent for a in n.alerts if a.rule == "stopped"]
        assert "resolved" not in stopped, (run_s, [(n.kind, n.created_at) for n in p.sent])


def test_lag_left_on_a_topic_nobody_consumes_does_not_hold_stopped() -> None:
    """A group consumes `events` (idle at night) and keeps old offsets on `legacy`, no longer subscribed, 5,000
    behind. A deploy leaves it Empty 5 minutes: `stopped` fired, and stayed up 6 hours after the members were back
    (held: nothing was committed on the idle topic)."""
    events, legacy = TopicPartition("events", 0), TopicPartition("legacy", 0)
    p = _daemon_like({})
    for i in range(240):
        t = i * 30.0
        committed = {events: 1000, legacy: 100}
        ends = {events: 1000, legacy: 5100}
        if 3600 <= t < 3900:
            g = group("app", committed=committed, state="Empty", members=0)
        else:
            g = group("app", committed=committed, subscribed=("events",), assigned=(events,))
        p.step(snapshot(t, [g], ends))
    assert "stopped" not in p.firing(), p.firing()


def test_falling_behind_is_not_held_for_hours_by_a_partition_without_a_leader() -> None:
    """A consumer slower than its producer on every partition; one partition loses its leader for 5 hours, and the
    consumer, scaled up, drains the others. Held at every poll with a log end unread, falling_behind stayed up
    the 5 hours: after a window, the partitions read are judged."""
    second = TopicPartition("orders", 1)
    p = _daemon_like({"lag": {"enabled": False}, "stalled": {"enabled": False}})
    ends = {TP: 0, second: 0}
    committed = {TP: 0, second: 0}
    for i in range(300):
        t = i * 30.0
        offline = i >= 80
        ends[TP] += 3000
        if not offline:
            ends[second] += 3000
        rate = 2400 if t < 3600 else 9000
        committed = {
            tp: min(ends[tp], committed[tp] + rate) if not (offline and tp == second) else committed[tp]
            for tp in (TP, second)
        }  # fmt: skip  (nobody can fetch from a partition without a leader)
        snap = snapshot(t, [group("app", committed=dict(committed), assigned=(TP, second))], dict(ends))
        p.step(_unread(snap, second) if offline else snap)
    assert "falling_behind" not in p.firing(), [(n.kind, n.created_at) for n in p.sent]


SECONDS_RULES = {
    "lag": {"warning": {"seconds": 300}, "critical": {"seconds": 1800}, "for_s": 0},
    "falling_behind": {"enabled": False},
    "stalled": {"enabled": False},
}


def _behind(t: float, rate: int = 10, behind_s: int = 2400) -> tuple[int, int]:
    """A log growing `rate` records/s and a consumer `behind_s` behind it (from the start: at offset 100)."""
    end = int(t * rate) + 100
    return end, max(100, end - behind_s * rate)


def _lag_notifications(p: Pipeline) -> list[tuple[str, str]]:
    return [(n.kind, n.severity_text) for n in p.sent for a in n.alerts if a.rule == "lag"]


@pytest.mark.parametrize("down", ["lagwatch", "cluster"])
def test_a_blind_spell_longer_than_the_lag_never_resolves_it(down: str) -> None:
    """A consumer steadily 40 minutes behind, critical. lagwatch then sees nothing for 45 minutes (itself down, or
    the cluster unreachable from it). What the log grew by meanwhile is dated at the spell's end (a lower bound):
    the commit fell inside it, read as 0 s behind, and the critical alert resolved, then paged again from warning
    9 minutes later. A lower bound now never lowers an alert: it stays critical, without a word."""
    p = Pipeline(SECONDS_RULES, {"group_wait_s": 30, "group_interval_s": 300}, max_gap_s=90)
    for t in range(0, 4 * 3600, 30):
        end, committed = _behind(t)
        if 7200 <= t < 7200 + 2700:
            if down == "cluster":
                p.step(snapshot(t, [], {}, error="connection refused"))
            continue
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
        if t >= 2400:
            assert p.firing().get("lag") == "critical", t
    assert _lag_notifications(p) == [("firing", "warning"), ("update", "critical")]


@pytest.mark.parametrize("other", [None, "caught up", "2 s behind"])
def test_a_log_cut_short_by_an_election_never_resolves_the_lag(other: str | None) -> None:
    """An unclean leader election cuts the last records off the log: its history of log ends was wiped, the lag in
    seconds unknown, then capped at the new history's span, so a critical lag (the records behind never fell)
    resolved, paged again as warning 5 minutes later, and critical 15 minutes after that. With another partition
    of the topic known to be (nearly) caught up, its figure was taken for the topic's."""
    p = Pipeline(SECONDS_RULES, {"group_wait_s": 30, "group_interval_s": 300}, max_gap_s=90)
    p1 = TopicPartition("orders", 1)
    for t in range(0, 3 * 3600, 30):
        end, committed = _behind(t, behind_s=3600)
        end -= 310 if t >= 7200 else 0  # 10 below the last poll's log end, then growing again
        commits, ends = {TP: committed}, {TP: end}
        if other is not None:
            commits[p1], ends[p1] = t * 10 + (100 if other == "caught up" else 80), t * 10 + 100
        p.step(snapshot(t, [group(committed=commits)], ends))
        if t >= 3600:
            assert p.firing().get("lag") == "critical", t
    assert _lag_notifications(p) == [("firing", "warning"), ("update", "critical")]


def test_a_consumer_that_catches_up_after_a_blind_spell_resolves() -> None:
    """Held on a lower bound, the alert still resolves when the records behind are consumed."""
    p = Pipeline(SECONDS_RULES, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    for t in range(0, 3 * 3600, 30):
        end, committed = _behind(t)
        if 7200 <= t < 9900:
            continue
        if t >= 9960:
            committed = end  # caught up
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    assert "lag" not in p.firing() and _lag_notifications(p)[-1] == ("resolved", "resolved")


@pytest.mark.parametrize("restart", [False, True])
def test_a_partition_unread_when_a_blind_spell_ends_takes_its_growth_when_next_read(restart: bool) -> None:
    """lagwatch was blind for two hours; the topic was quiet, then busy in the spell's last minutes. Partition 0's
    log end was not read at the first poll after it (no leader yet), so what its log grew by was spread back over
    the two hours at the next poll: a consumer 3 minutes behind read as 28 minutes behind, and was paged. Also
    across a restart just after that poll, shorter than a blind spell (what is owed is saved)."""
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    rules = SECONDS_RULES | {"lag": {"warning": {"seconds": 300}, "critical": {"seconds": 1800}, "for_s": 60}}
    p = Pipeline(rules, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    worst = 0.0
    for t in range(0, 4 * 3600, 30):
        if 3600 <= t < 10800:
            continue  # blind; production stops at 3600 and starts again at 10200
        end = (t * 10 if t < 3600 else 36000 + max(0, t - 10200) * 10) + 100
        snap = snapshot(t, [group(committed={p0: end - 1800, p1: end - 1800})], {p0: end, p1: end})
        if t == 10800:
            snap = dataclasses.replace(
                snap, partitions={**snap.partitions, p0: PartitionOffsets(None, None, error="LEADER_NOT_AVAILABLE")}
            )
        seconds = p.step(snap).measures["g"].max_lag_seconds
        if restart and t == 10800:  # the history saved and loaded, seconds down
            restored = ClusterHistory.from_json(json.loads(json.dumps(p.history.to_json())))
            restored.max_gap_s, restored.keep = p.history.max_gap_s, p.history.keep
            p.history = p.pipeline.history = restored
        if t > 10800 and seconds is not None:
            worst = max(worst, seconds)
    assert worst <= 181, worst
    assert _lag_notifications(p) == []


def test_a_lower_bound_never_resolves_an_alert_whose_firing_level_is_on_records() -> None:
    """Warning on seconds, critical on records. A stalled consumer went critical; during a blind spell it came
    back and stuck 50 records short of a log that stopped growing (those records 1.6 hours old: a warning). Their
    time after the spell is a lower bound: the critical, disproved by the records, was resolved, and a new warning
    paged 6 minutes later. It is lowered to the warning the seconds cannot rule out, never resolved."""
    rules = SECONDS_RULES | {"lag": {"warning": {"seconds": 300}, "critical": {"offsets": 100000}, "for_s": 60}}
    p = Pipeline(rules, {"group_wait_s": 0, "group_interval_s": 0}, max_gap_s=90)
    for t in range(0, 4 * 3600, 30):
        if 4600 <= t < 10800:
            continue
        end = min(t, 5000) * 100 + 100
        committed = end if t < 3000 else (300100 if t < 4600 else end - 50)
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    assert _lag_notifications(p) == [("firing", "warning"), ("update", "critical"), ("update", "warning")]
    assert p.firing()["lag"] == "warning"


def _checkpoint_committer_polls(p: Pipeline, start: int, end: int, stop_at: float | None = None) -> None:
    """An assign() group (no members: a Flink or Spark job) keeping up with 20 records/s that commits at each
    checkpoint, every 3 minutes, up to the log end; polled every 10 s; from `stop_at` on it commits nothing."""
    for i in range(start, end):
        t = i * 10.0
        checkpoint = t if stop_at is None else min(t, stop_at)
        committed = int(20 * (checkpoint - checkpoint % 180))
        p.step(
            snapshot(
                t, [group("flink", committed={TP: committed}, kind=GroupKind.SIMPLE, members=0)], {TP: int(20 * t)}
            )
        )


def test_a_committer_on_its_own_checkpoint_cadence_is_not_stopped_and_its_real_stop_still_pages() -> None:
    """Under the 2-minute default `stopped` window, a healthy assign() job committing every 3 minutes paged
    `stopped` critical at every checkpoint and resolved at the next commit (seen on a real broker: 6 incidents in 8
    minutes). It is stopped once it has gone twice its learnt cadence without a commit (twice the window in its
    first hour), as `stalled` waits for a sink; a real stop still pages, and is one incident."""
    p = Pipeline({"lag": {"enabled": False}})  # the default rules: stopped 2 minutes, stalled 5
    _checkpoint_committer_polls(p, 0, 720)  # two hours
    assert p.sent == []
    progress = p.history.groups["flink"].partitions[TP]
    assert progress.commit_cadence is not None and 170 <= progress.commit_cadence <= 180
    _checkpoint_committer_polls(p, 720, 900, stop_at=7200.0)
    fired = [n.created_at for n in p.sent if any(a.rule == "stopped" and a.state == "firing" for a in n.alerts)]
    assert len(fired) == 1 and all(n.kind != "resolved" for n in p.sent)
    assert 7200 + 2 * 170 <= fired[0] <= 7200 + 2 * 180 + 20, fired


def test_a_topic_made_again_between_two_polls_is_no_rewind_and_a_real_rewind_still_pages() -> None:
    """The topic deleted and made again between two polls: the group's committed offsets are the new log's, lower
    than before, and `rewind` paged "records will be consumed again" (seen on a real broker, at every try). The
    log end went back too: that is no consumer going back. A consumer reset to earlier offsets still pages."""
    p = pipeline(rewind={"window_s": 60})
    other = TopicPartition("other", 0)
    for i, t in enumerate(times(0, 100)):
        made_again = i >= 10  # the topic's new log: 30 records, the group caught up on it
        ends = {TP: 30 if made_again else 500, other: 500}
        committed = {TP: 20 if made_again else 480, other: 100 if i >= 12 else 480}  # `other`: reset by hand
        p.step(snapshot(t, [group("g", committed=committed, subscribed=("orders", "other"))], ends))
    rewinds = [a for n in p.sent for a in n.alerts if a.rule == "rewind" and a.state == "firing"]
    assert {a.labels["topic"] for a in rewinds} == {"other"}


def test_a_slow_consumer_under_retention_is_one_below_log_start_incident_not_one_per_deletion() -> None:
    """A slow consumer on a topic whose retention deletes a segment every few minutes: it falls below the log start,
    is reset to it (auto.offset.reset=earliest), and falls below it again at the next deletion. Each reset resolved
    the critical and the next deletion paged a new one (4 incidents in 4 minutes on a real broker). It stays firing
    while records keep being lost (keep_firing_for_s, 15 minutes by default), and resolves once they are not."""
    p = pipeline(lag={"enabled": False})
    states = []
    for t in times(0, 2400, seed=3):
        deleting = t < 1200  # a deletion every 2 minutes for 20 minutes, the consumer reset to the start 30 s later
        start = 1000 + 1000 * int(t // 120) if deleting else 11_000
        behind = deleting and t % 120 < 30
        committed = start - 200 if behind else start + int(t % 120)
        p.step(snapshot(t, [group("slow", committed={TP: committed})], {TP: 20_000}, starts={TP: start}))
        alert = next((a for a in p.book.alerts.values() if a.rule == "below_log_start"), None)
        states.append((t, alert.state if alert else None))
    fired = [t for (_, before), (t, now) in itertools.pairwise(states) if now == "firing" and before != "firing"]
    resolved = [t for (_, before), (t, now) in itertools.pairwise(states) if now != "firing" and before == "firing"]
    assert len(fired) == 1 and len(resolved) == 1, (fired, resolved)
    assert resolved[0] >= 1080 + 30 + 900 - 5  # fifteen minutes after the last poll that found it below


def test_a_consumer_back_from_a_hang_is_not_falling_behind() -> None:
    """A member hung for most of the window, then committed again, still behind: the window's rate said "consumes
    0.2/s while 19.8/s arrive", `falling_behind` fired, and resolved a poll later as the consumer caught up (seen on
    a real broker around a stuck rebalance). It needs commits in each half of the window: a hang is `stalled`'s."""
    p = pipeline(stalled={"enabled": False}, lag={"enabled": False})
    for t in times(0, 260, seed=5):
        end = int(20 * t)
        if t < 100:
            committed = end  # keeping up
        elif t < 158:
            committed = 2000  # hung: 20 records/s pile up
        elif t < 170:
            committed = 2000 + int(10 * (t - 158))  # back: its first batches, slower than records arrive
        else:
            committed = min(end, 2120 + int(60 * (t - 170)))  # then catching up, 40 records/s faster
        p.step(snapshot(t, [group("g", committed={TP: committed})], {TP: end}))
    assert not [n for n in p.sent if any(a.rule == "falling_behind" for a in n.alerts)]
    slow = pipeline(stalled={"enabled": False}, lag={"enabled": False})
    for t in times(0, 200, seed=6):  # a consumer that stays, at half the production rate: still paged
        slow.step(snapshot(t, [group("g", committed={TP: int(10 * t)})], {TP: int(20 * t)}))
    assert [n.kind for n in slow.sent if any(a.rule == "falling_behind" for a in n.alerts)][:1] == ["firing"]


def _sink_through_an_outage(p: Pipeline, hang_after: float | None = None) -> None:
    """10 records/s, a sink that flushes every 100 s (its cadence not learnt yet: its third flush); the broker down
    from 212 to 322 s (two polls after a flush saw records waiting): the flush at 300 fails, the next is at 400.
    From `hang_after` on it flushes nothing more (members still there)."""
    for t in times(0, 1200):
        if 212 <= t < 322:
            p.step(snapshot(t, [], {}, error="connection refused"))
            continue
        flushed = max(0.0, t - t % 100)
        if flushed == 300:
            flushed = 200  # its flush failed with the broker down
        if hang_after is not None:
            flushed = min(flushed, hang_after - hang_after % 100)
        p.step(snapshot(t, [group("sink", committed={TP: int(10 * flushed)})], {TP: int(10 * t)}))


def test_a_sink_is_not_stalled_by_the_wait_a_broker_outage_imposed() -> None:
    """Records wait for a sink's flush; a broker outage holds that flush too. Their wait was counted across the
    outage: the sink was paged `stalled` (critical) a minute after the broker came back, and resolved at its next
    flush. Only what lagwatch watched without a gap counts; a sink that hangs is still paged after the outage."""
    rules = {"stalled": {"window_s": 60}, "lag": {"enabled": False}, "falling_behind": {"enabled": False}}
    healthy = pipeline(**rules)
    _sink_through_an_outage(healthy)
    assert notified(healthy, "sink") == []
    hung = pipeline(**rules)
    _sink_through_an_outage(hung, hang_after=700)
    fired = [n.created_at for n in hung.sent if n.group_labels.get("group") == "sink" and n.kind == "firing"]
    assert fired and 880 <= fired[0] <= 930, fired  # twice its cadence (about 95 s) after its last flush


@pytest.mark.parametrize("how", ["a record arrives", "an operator resets it to the earliest offset"])
def test_an_empty_group_is_stopped_once_it_has_lagged_for_the_window_not_at_once(how: str) -> None:
    """`stopped` is "Empty with lag for window_s": it measured only how long the group had been Empty, so a group
    stopped long ago on a quiet topic was paged critical the moment one record arrived, and an operator's reset
    (which needs the group Empty) was paged with its `rewind` before the consumer could be started again."""
    p = pipeline(lag={"enabled": False}, stopped={"window_s": 30})
    end = committed = 1000
    changed_at = 300.0
    for t in times(0, 600):
        if t >= changed_at:
            if how == "a record arrives":
                end = 1001
            else:
                committed = 0
        p.step(snapshot(t, [group("q", committed={TP: committed}, state="Empty", members=0)], {TP: end}))
    fired = [n.created_at for n in p.sent if any(a.rule == "stopped" and a.state == "firing" for a in n.alerts)]
    assert fired, p.sent
    assert changed_at + 30 - INTERVAL <= fired[0] <= changed_at + 30 + 2 * INTERVAL, fired


def test_a_stall_firing_before_an_outage_stays_one_incident_through_it() -> None:
    """Counting a new stall's wait from the end of the gap resolved a stall that was firing when the gap began (its
    records still waiting), and paged it again once the wait had passed anew: a firing stall is held."""
    p = pipeline(stalled={"window_s": 60}, lag={"enabled": False}, falling_behind={"enabled": False})
    _sink_through_an_outage(p, hang_after=50)  # hung from 0 s on: firing before the outage at 212 s
    stalled = [(n.kind, a.state) for n in p.sent for a in n.alerts if a.rule == "stalled"]
    assert stalled == [("firing", "firing")], stalled


def test_a_consumer_keeping_up_within_the_rates_noise_is_not_falling_behind() -> None:
    """The demo's fast consumer: 19.8 records/s consumed against 19.8 produced, its lag 5 growing to 7 over the
    window as commits land in steps. `falling_behind` paged it (warning) and resolved 35 s later."""
    p = pipeline(lag={"enabled": False})
    end = committed = 0
    for i, t in enumerate(times(0, 300)):
        end += 198  # 19.8/s at a 10-s poll
        committed = end - 5 - i // 3  # keeps up, but for a record every third poll: its lag creeps up
        p.step(snapshot(t, [group(committed={TP: committed})], {TP: end}))
    assert "falling_behind" not in {r for _, rs in notified(p) for r in rs}


def test_a_slow_topics_consumer_keeping_up_is_not_falling_behind_and_one_slower_by_a_tenth_is() -> None:
    """The demo's assign() consumer: 2.6 records/s consumed against 2.6 produced, committing each second, its lag
    creeping from 0 to 4 through a minute of polls (what arrived since its last commit). It grew by 4, more than 2%
    of the 156 produced, and was paged `falling_behind` and resolved 35 s later. A consumer a tenth slower on the
    same topic gains 16 records a minute: paged."""

    def run(lags: Callable[[int], int]) -> set[str]:
        p = pipeline(lag={"enabled": False}, falling_behind={"window_s": 60}, rate_window_s=60)
        end = 0
        for i, t in enumerate(times(0, 300)):
            end += 13  # 2.6/s
            p.step(snapshot(t, [group(committed={TP: end - lags(i)})], {TP: end}))
        return {r for _, rs in notified(p) for r in rs}

    steps = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4]  # a minute of 5-s polls, then a commit catches up
    assert "falling_behind" not in run(lambda i: steps[i % len(steps)])
    assert "falling_behind" in run(lambda i: int(1.3 * i))  # 0.26/s behind: a tenth


def _new_group_paged_stalled_at(
    commits: Callable[[float, int], int | None], ends: Callable[[float], int]
) -> list[float]:
    """A group made at 60 s, under lagwatch polling from 0 s every 5 s with a 60-s `stalled` window: when it was
    paged `stalled`, seconds after its birth. `commits(age, end)`: its committed offset (None: none yet)."""
    p = pipeline(stalled={"window_s": 60}, lag={"enabled": False}, falling_behind={"enabled": False})
    for t in times(0, 900):
        end = ends(t)
        groups = []
        if t >= 60:
            offset = commits(t - 60, end)
            groups.append(group("new", committed={} if offset is None else {TP: offset}, assigned=(TP,)))
        p.step(snapshot(t, groups, {TP: end}))
    return [n.created_at - 60 for n in p.sent if any(a.rule == "stalled" and a.state == "firing" for a in n.alerts)]


def test_a_new_group_that_commits_promptly_and_hangs_is_paged_at_the_window_and_new_sinks_are_not() -> None:
    """A group seen committing within half the window of its start, records arriving, commits promptly: one that
    commits once after a deploy and hangs (heartbeating) is paged within two polls of the window, not at twice it
    (its first hour without a learnt cadence). A new sink's first flush comes a flush interval after its start: one
    flushing at 1.2 and one at 1.8 times the window stay quiet, and so does one that committed its start position
    at once on a quiet topic and flushes at 1.2 times the window once records come."""
    busy = lambda t: int(10 * t)  # noqa: E731
    first = {}
    for name, hung in (
        ("seen before its first commit", lambda age, end: None if age < 4 else 10 * 62),
        ("already committed when first seen", lambda age, end: 10 * 60),
    ):
        paged = _new_group_paged_stalled_at(hung, busy)
        assert paged, name
        first[name] = paged[0]
    # From its commit (at 5 s, and at its birth): the window, and at most two polls more (times jitter by 2 ms).
    assert 59.9 <= first["seen before its first commit"] - 5 <= 60 + 2 * INTERVAL, first
    assert 59.9 <= first["already committed when first seen"] <= 60 + 2 * INTERVAL, first
    for interval in (72.0, 108.0):  # commits what it read at each flush, from its start
        flushing = lambda age, end, i=interval: None if age < i else int(10 * (60 + age - age % i))  # noqa: E731
        assert _new_group_paged_stalled_at(flushing, busy) == [], interval
    quiet_then_busy = lambda t: 0 if t < 200 else int(10 * (t - 200))  # noqa: E731
    at_once = lambda age, end: 0 if age < 140 else int(10 * (60 + age - age % 72 - 200))  # noqa: E731
    assert _new_group_paged_stalled_at(at_once, quiet_then_busy) == []


def test_a_group_seen_committing_promptly_is_remembered_across_a_restart() -> None:
    p = pipeline(stalled={"window_s": 60})
    for i, t in enumerate(times(0, 30)):
        p.step(snapshot(t, [group("new", committed={TP: 10 * i})] if i >= 3 else [], {TP: 10 * i + 10}))
    assert p.history.groups["new"].prompt
    loaded = ClusterHistory.from_json(json.loads(json.dumps(p.history.to_json())))
    assert loaded.groups["new"].prompt and not loaded.groups["new"].learning(t)


def test_one_answer_without_an_empty_groups_offsets_ends_nothing_and_reports_no_expiry() -> None:
    """A stopped group (Empty, its lag growing): one poll's OffsetFetch answer leaves its committed offsets out,
    the group still listed, and the next has them again, unchanged. That poll took them for vanished: `stopped`
    and `lag` resolved, `expired` fired, and `stopped` paged again a window later. Offsets that stay gone are
    reported at the next poll, dated from the first that missed them."""
    p = pipeline()
    end = _keeping_up_for_90_s(p)
    committed = end - 20
    for i, t in enumerate(times(90, 300)):
        end += 100
        offsets = {} if i == 20 else {TP: committed}
        p.step(snapshot(t, [group(committed=offsets, state="Empty", members=0)], {TP: end}))
    told = notified(p, "g")
    assert [kind for kind, _ in told].count("firing") == 1 and "resolved" not in [kind for kind, _ in told], told
    assert {r for _, rules in told for r in rules} == {"lag", "stopped"}, told

    gone = pipeline()
    end = 0
    for i, t in enumerate(times(0, 200)):
        end += 100
        offsets = {TP: 50} if i < 30 else {}
        gone.step(snapshot(t, [group(committed=offsets, state="Empty", members=0)], {TP: end}))
    expired = [a for a in gone.book.alerts.values() if a.rule == "expired"]
    assert expired and expired[0].details["vanished_at"] == times(0, 200)[30], expired
