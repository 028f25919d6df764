"""Each rule over synthetic histories, and the invariants that keep on-call engineers trusting the alerts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from lagwatch.history import ClusterHistory, GroupMeasure, PartitionMeasure
from lagwatch.model import GroupKind, GroupSnapshot, Member, TopicPartition, alert_key
from tests.synthetic import TP, Pipeline, group, snapshot

TP1 = TopicPartition("orders", 1)
AUDIT = TopicPartition("audit", 0)
FAST = {"lag": {"warning": {"offsets": 100}, "critical": {"offsets": 1000}, "for_s": 60}}


def rules_of(evaluation) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {f.rule: f.severity for f in evaluation.findings}


def test_lag_threshold_waits_for_its_duration_then_fires_and_escalates() -> None:
    p = Pipeline(FAST)
    p.step(snapshot(0, [group(committed={TP: 0})], {TP: 150}))
    p.step(snapshot(30, [group(committed={TP: 0})], {TP: 160}))
    assert "lag" not in p.firing()  # pending: for_s is 60
    p.step(snapshot(60, [group(committed={TP: 0})], {TP: 170}))
    assert p.firing()["lag"] == "warning"
    p.step(snapshot(90, [group(committed={TP: 0})], {TP: 1500}))
    assert p.firing()["lag"] == "critical"
    (alert,) = [a for a in p.book.alerts.values() if a.rule == "lag"]
    assert alert.details["lag"] == 1500 and alert.labels["topic"] == "orders" and alert.labels["group"] == "g"


def test_lag_in_seconds_threshold() -> None:
    p = Pipeline({"lag": {"warning": {"seconds": 100}, "critical": {"seconds": 1000}, "for_s": 0}})
    for t in range(0, 400, 30):  # 1 record/s produced, the consumer stuck at offset 10
        evaluation = p.step(snapshot(t, [group(committed={TP: 10})], {TP: 10 + t}))
    assert rules_of(evaluation)["lag"] == "warning"
    (finding,) = [f for f in evaluation.findings if f.rule == "lag"]
    assert 360 <= finding.details["lag_seconds"] <= 400  # type: ignore[operator]


@given(noise=st.lists(st.integers(-15, 15), min_size=20, max_size=60))
@settings(max_examples=50, deadline=None)
def test_no_flapping_at_a_steady_threshold(noise: list[int]) -> None:
    """Lag hovering around the threshold (within the hysteresis band) fires once and never resolves."""
    p = Pipeline(
        {"lag": {"warning": {"offsets": 100}, "critical": {"offsets": 10**9}, "for_s": 0, "resolve_ratio": 0.8}}
    )
    p.step(snapshot(0, [group(committed={TP: 0})], {TP: 105}))
    for i, n in enumerate(noise, start=1):
        p.step(snapshot(i * 30, [group(committed={TP: 1000 * i})], {TP: 1000 * i + 100 + n}))
    lag_notes = [n for n in p.sent if any(a.rule == "lag" for a in n.alerts)]
    assert [n.kind for n in lag_notes] == ["firing"]


def test_a_pending_lag_alert_needs_the_full_threshold_for_its_whole_for() -> None:
    """Over the threshold at one poll (a pause), then back to 85% of it: the condition did not hold for `for`.
    The hysteresis band keeps an alert that fired; it does not carry one that is only pending to firing."""
    p = Pipeline({"lag": {"warning": {"offsets": 1000}, "critical": {"offsets": 10**9}, "for_s": 120}})
    for i in range(20):
        lag = 1050 if i == 5 else 850
        p.step(snapshot(i * 30, [group(committed={TP: 3000 * i + 5000 - lag})], {TP: 3000 * i + 5000}))
    assert not [n for n in p.sent if any(a.rule == "lag" for a in n.alerts)]
    # Over it for the whole `for`, it fires; and then the band holds it at 85%.
    for i in range(20, 40):
        lag = 1050 if i < 26 else 850
        p.step(snapshot(i * 30, [group(committed={TP: 3000 * i + 5000 - lag})], {TP: 3000 * i + 5000}))
    assert [n.kind for n in p.sent if any(a.rule == "lag" for a in n.alerts)] == ["firing"]


@given(
    ends=st.lists(st.integers(0, 50), min_size=3, max_size=30),
    state=st.sampled_from(["Stable", "Empty"]),
    members=st.integers(0, 2),
)
@settings(max_examples=60, deadline=None)
def test_no_finding_for_a_caught_up_group(ends: list[int], state: str, members: int) -> None:
    """Whatever the traffic, a group whose committed offset is always at the log end raises nothing.
    (Expiry is left out: a caught-up Empty group's offsets still expire, and 'earliest' would replay them.)"""
    p = Pipeline({"expiry": {"enabled": False}, "rate_window_s": 120})
    end = 0
    for i, step in enumerate(ends):
        end += step
        members_now = members if state == "Stable" else 0
        evaluation = p.step(snapshot(i * 30, [group(committed={TP: end}, state=state, members=members_now)], {TP: end}))
        assert evaluation.findings == ()


def test_stalled_only_while_new_records_arrive() -> None:
    p = Pipeline({"stalled": {"window_s": 120, "learn_commit_interval": False}})  # the window alone
    for t in range(0, 150, 30):
        evaluation = p.step(snapshot(t, [group(committed={TP: 40})], {TP: 50 + t}))
    assert rules_of(evaluation).get("stalled") == "critical"
    quiet = Pipeline({"stalled": {"window_s": 120}})
    for t in range(0, 300, 30):  # same committed offset, but the topic is quiet and the group caught up
        evaluation = quiet.step(snapshot(t, [group(committed={TP: 40})], {TP: 40}))
        assert evaluation.findings == ()


def test_stopped_when_empty_with_lag_for_the_window_not_when_caught_up() -> None:
    p = Pipeline({"stopped": {"window_s": 60}, "expiry": {"enabled": False}})
    p.step(snapshot(0, [group(committed={TP: 10})], {TP: 20}))
    p.step(snapshot(30, [group(committed={TP: 10}, state="Empty", members=0)], {TP: 25}))
    assert "stopped" not in rules_of(
        p.step(snapshot(60, [group(committed={TP: 10}, state="Empty", members=0)], {TP: 30}))
    )
    evaluation = p.step(snapshot(90, [group(committed={TP: 10}, state="Empty", members=0)], {TP: 35}))
    assert rules_of(evaluation)["stopped"] == "critical"
    caught_up = Pipeline({"stopped": {"window_s": 60}, "expiry": {"enabled": False}})
    for t in range(0, 300, 30):
        assert (
            caught_up.step(snapshot(t, [group(committed={TP: 10}, state="Empty", members=0)], {TP: 10})).findings == ()
        )


def test_stopped_simple_group_without_progress_while_lag_grows() -> None:
    p = Pipeline({"stopped": {"window_s": 60}, "expiry": {"enabled": False}})
    simple = lambda: group(committed={TP: 5}, state="Empty", kind=GroupKind.SIMPLE, members=0)  # noqa: E731
    for t in (0, 30, 60, 90):
        evaluation = p.step(snapshot(t, [simple()], {TP: 10 + t}))
    # In the first hour a group without members is given twice the window (its commit cadence is not known yet).
    assert "stopped" not in rules_of(evaluation)
    evaluation = p.step(snapshot(120, [simple()], {TP: 130}))
    assert rules_of(evaluation)["stopped"] == "critical"


def test_falling_behind_with_eta_never_and_catching_up_with_eta() -> None:
    p = Pipeline({"falling_behind": {"window_s": 90}, "rate_window_s": 90})
    for i in range(5):  # 20/s produced, 10/s consumed
        evaluation = p.step(snapshot(i * 30, [group(committed={TP: 300 * i})], {TP: 600 * i + 10}))
    (finding,) = [f for f in evaluation.findings if f.rule == "falling_behind"]
    assert "ETA: never" in finding.summary and finding.details["eta_s"] is None
    catching = Pipeline(FAST | {"rate_window_s": 90})
    for i in range(4):  # 10/s produced, 30/s consumed: lag 2000 shrinks by 20/s, to 200 at t=90
        evaluation = catching.step(snapshot(i * 30, [group(committed={TP: 900 * i})], {TP: 2000 + 300 * i}))
    assert "falling_behind" not in rules_of(evaluation)
    measure = evaluation.measures["g"]
    assert measure.lag.sum_lag == 200 and measure.eta_s is not None and abs(measure.eta_s - 200 / 20) < 1e-6
    assert "catching up in about 10s" in next(f.summary for f in evaluation.findings if f.rule == "lag")


def test_rewind_is_reported_for_a_while() -> None:
    p = Pipeline({"rewind": {"window_s": 60}})
    p.step(snapshot(0, [group(committed={TP: 500})], {TP: 500}))
    evaluation = p.step(snapshot(30, [group(committed={TP: 100})], {TP: 500}))
    (finding,) = [f for f in evaluation.findings if f.rule == "rewind"]
    assert "0: 500 -> 100" in finding.summary
    assert "rewind" not in rules_of(p.step(snapshot(120, [group(committed={TP: 500})], {TP: 500})))


def test_expiry_of_an_empty_classic_group_warns_then_goes_critical() -> None:
    p = Pipeline({"stopped": {"enabled": False}, "lag": {"enabled": False}})
    p.step(snapshot(0, [group(committed={TP: 5})], {TP: 10}, retention_minutes=10))
    p.step(snapshot(60, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10))
    assert "expiry" not in rules_of(
        p.step(snapshot(400, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10))
    )
    warn = p.step(
        snapshot(60 + 460, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10)
    )
    (finding,) = [f for f in warn.findings if f.rule == "expiry"]
    assert finding.severity == "warning" and finding.details["expires_at"] == 660 and finding.details["observed"]
    assert "'latest' skips 5 unconsumed records, 'earliest' replays 10" in finding.summary
    crit = p.step(
        snapshot(60 + 550, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10)
    )
    assert rules_of(crit)["expiry"] == "critical"


def test_expiry_unobserved_clock_never_pages_until_sure() -> None:
    """A group already Empty at first sight: lagwatch does not know when it went Empty. No alert at first start
    (that would be hundreds of pages at install time); a warning once even the latest possible expiry is near."""
    p = Pipeline({"stopped": {"enabled": False}, "lag": {"enabled": False}})
    empty = [group(committed={TP: 5}, state="Empty", members=0)]
    for t in (1000, 1030, 1300):
        assert "expiry" not in rules_of(p.step(snapshot(t, empty, {TP: 10}, retention_minutes=10)))
    evaluation = p.step(snapshot(1000 + 460, empty, {TP: 10}, retention_minutes=10))
    (finding,) = [f for f in evaluation.findings if f.rule == "expiry"]
    assert finding.severity == "warning" and not finding.details["observed"]
    assert finding.details["expires_at"] == 1600 and "at the latest" in finding.summary


def test_expiry_per_group_kind() -> None:
    # Simple group: each partition from its own last commit.
    p = Pipeline({"stopped": {"enabled": False}, "lag": {"enabled": False}})
    simple = lambda c: group(committed=c, state="Empty", kind=GroupKind.SIMPLE, members=0)  # noqa: E731
    p.step(snapshot(0, [simple({})], {TP: 10, TP1: 10}, retention_minutes=10))
    p.step(snapshot(10, [simple({TP: 1, TP1: 1})], {TP: 10, TP1: 10}, retention_minutes=10))
    p.step(snapshot(300, [simple({TP: 1, TP1: 2})], {TP: 10, TP1: 10}, retention_minutes=10))  # TP1 committed again
    (f,) = [
        f for f in p.step(snapshot(470, [simple({TP: 1, TP1: 2})], {TP: 10, TP1: 10}, retention_minutes=10)).findings
    ]
    assert f.rule == "expiry" and f.details["partitions"] == [{"topic": "orders", "partition": 0}]
    # Stable classic group with known subscriptions: only topics nobody subscribes to; KIP-848 likewise.
    for kind in (GroupKind.CLASSIC, GroupKind.CONSUMER):
        q = Pipeline({"lag": {"enabled": False}})
        g = lambda: group(committed={}, kind=kind, subscribed=("orders",))  # noqa: E731,B023
        q.step(snapshot(0, [g()], {TP: 10, AUDIT: 10}, retention_minutes=10))
        live = group(committed={TP: 3, AUDIT: 4}, kind=kind, subscribed=("orders",), assigned=(TP,))
        q.step(snapshot(10, [live], {TP: 10, AUDIT: 10}, retention_minutes=10))
        (f,) = [
            f
            for f in q.step(snapshot(560, [live], {TP: 10, AUDIT: 10}, retention_minutes=10)).findings
            if f.rule == "expiry"
        ]
        assert f.details["partitions"] == [{"topic": "audit", "partition": 0}] and f.severity == "critical"


def test_offsets_expired_when_they_vanish() -> None:
    p = Pipeline({"stopped": {"enabled": False}, "lag": {"enabled": False}, "expiry": {"enabled": False}})
    p.step(snapshot(0, [group(committed={TP: 5})], {TP: 10}, retention_minutes=10))
    p.step(snapshot(30, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10))
    evaluation = p.step(snapshot(640, [], {}, retention_minutes=10))  # the group and its offsets are gone, on time
    (finding,) = [f for f in evaluation.findings if f.rule == "expired"]
    assert finding.severity == "critical" and finding.details["group_gone"] and "orders/0" in finding.summary


def test_deleted_group_or_topic_is_not_an_expiry() -> None:
    """DeleteGroups before the offsets could expire, or a deleted topic: an operator's act, never a page."""
    p = Pipeline({"stopped": {"enabled": False}, "lag": {"enabled": False}, "expiry": {"enabled": False}})
    p.step(snapshot(0, [group(committed={TP: 5})], {TP: 10}, retention_minutes=10))
    p.step(snapshot(30, [group(committed={TP: 5}, state="Empty", members=0)], {TP: 10}, retention_minutes=10))
    assert "expired" not in rules_of(p.step(snapshot(60, [], {}, retention_minutes=10)))
    q = Pipeline({"lag": {"enabled": False}, "expiry": {"enabled": False}})
    both = {TP: 3, AUDIT: 4}
    q.step(snapshot(0, [group(committed=both, subscribed=("orders", "audit"))], {TP: 10, AUDIT: 10}))
    gone_topic = replace(
        snapshot(30, [group(committed={TP: 3}, subscribed=("orders",))], {TP: 10}), missing_topics=frozenset({"audit"})
    )
    assert "expired" not in rules_of(q.step(gone_topic))
    assert "expired" not in rules_of(q.step(snapshot(60, [group(committed={TP: 3})], {TP: 10})))


def test_committed_below_log_start() -> None:
    p = Pipeline()
    evaluation = p.step(snapshot(0, [group(committed={TP: 5})], {TP: 30}, starts={TP: 20}))
    (finding,) = [f for f in evaluation.findings if f.rule == "below_log_start"]
    assert finding.details["lost"] == 15 and finding.severity == "critical"


def test_outage_freezes_lag_alerts_and_raises_one_cluster_alert() -> None:
    p = Pipeline(FAST | {"cluster_unreachable": {"for_s": 30}, "expiry": {"enabled": False}})
    p.step(snapshot(0, [group(committed={TP: 0})], {TP: 500}))
    p.step(snapshot(60, [group(committed={TP: 0})], {TP: 500}))
    assert p.firing() == {"lag": "warning"}
    for t in (90, 120, 150, 180):
        evaluation = p.step(snapshot(t, [], {}, error="no broker answered"))
        assert [f.rule for f in evaluation.findings] == ["cluster_unreachable"]
    assert p.firing() == {
        "lag": "warning",
        "cluster_unreachable": "critical",
    }  # lag alert neither resolved nor re-fired
    p.step(snapshot(210, [group(committed={TP: 500})], {TP: 500}))  # back, caught up
    assert p.firing() == {}
    kinds = [(n.kind, n.group_key) for n in p.sent]
    assert kinds.count(("firing", "cluster=c|group=")) == 1


def test_overrides_by_group_regex_set_thresholds_and_routing_labels() -> None:
    p = Pipeline(
        FAST
        | {
            "lag": {"warning": {"offsets": 100}, "critical": {"offsets": 1000}, "for_s": 0},
            "overrides": [
                {
                    "match": {"group": "pay-.*"},
                    "rules": {"lag": {"warning": {"offsets": 10}}},
                    "labels": {"team": "payments"},
                }
            ],
        }
    )
    evaluation = p.step(snapshot(0, [group("pay-1", committed={TP: 0}), group("other", committed={TP: 0})], {TP: 50}))
    (finding,) = evaluation.findings
    assert finding.group == "pay-1" and finding.labels["team"] == "payments"


class _GeneralPathOnly(ClusterHistory):
    """A history that never offers an aligned window: the window rules take the Sample path every time."""

    def aligned_window(self, *args: object) -> None:  # type: ignore[override]
        return None

    def aligned_group_lags(self, *args: object) -> None:  # type: ignore[override]
        return None


_WINDOW_POLL = st.tuples(
    st.sampled_from(["ok"] * 8 + ["unreadable", "failed"]),
    st.lists(st.sampled_from([0, 0, 1, 2, "end"]), min_size=3, max_size=3),  # committed offsets advance by
    st.one_of(st.just([0, 0, 0]), st.lists(st.sampled_from([0, 1, 3]), min_size=3, max_size=3)),  # log ends, by
    st.sampled_from([False] * 5 + [True]),  # TP1's log end missing from the poll
    st.sampled_from([30] * 6 + [45, 200]),  # seconds since the previous poll (200: past max_gap_s)
)


_BUSY, _QUIET = ("ok", [0, 0, 0], [3, 3, 3], False, 30), ("ok", [0, 0, 0], [0, 0, 0], False, 30)


@given(st.lists(_WINDOW_POLL, min_size=2, max_size=40), st.sampled_from([0, 1, 2, 3, 3]))
@example([_BUSY] * 3 + [_QUIET] * 8, 3)  # records, then none: lag no longer grows, the group is not stopped
@example([_BUSY] * 3 + [("ok", [1, 0, 0], [3, 3, 3], False, 30)] * 8, 1)  # one partition commits: not stopped
@example(  # a group first read after a blind spell, then a record: both paths learn with the configured stall window
    [("unreadable", [0, 0, 0], [0, 0, 0], False, 30), ("failed", [0, 0, 0], [0, 0, 0], False, 30)]
    + [_QUIET] * 4
    + [("ok", [0, 0, 0], [0, 0, 1], False, 30)],
    0,
)
@settings(max_examples=300, deadline=None)
def test_window_rules_decide_the_same_from_aligned_windows(polls: list, stuck: int) -> None:  # type: ignore[type-arg]
    """stalled and stopped answer from array slices when every poll of a window sampled both values, and from
    Sample windows otherwise: the findings and held alerts are the same as from Sample windows alone, through
    commits, idle partitions, missing log ends, unreadable groups, failed polls and blind spells."""
    rules = {
        "stopped": {"window_s": 120, "for_s": 0},
        "stalled": {"window_s": 90, "for_s": 0},
        "falling_behind": {"enabled": False},
        "expiry": {"enabled": False},
        "lag": {"enabled": False},
    }
    fast, general = Pipeline(rules), Pipeline(rules)
    general.history = general.pipeline.history = _GeneralPathOnly("c", max_gap_s=90.0)
    # As the pipeline hooks its own history (it learnt the default stall window without, and took a group new
    # after a blind spell for a prompt committer where the other did not: hypothesis found it).
    general.history.stall_window_of = general.pipeline._stall_window
    tps = (TP, TP1, AUDIT)
    committed, ends, t = dict.fromkeys(tps, 10), dict.fromkeys(tps, 10), 0.0
    for kind, commits, produced, no_end, step in polls:
        t += step
        for i, tp in enumerate(tps):
            ends[tp] += produced[i]
            if i >= stuck:  # the first `stuck` partitions never commit again
                commit = commits[i]
                committed[tp] = ends[tp] if commit == "end" else min(ends[tp], committed[tp] + commit)
        poll_ends = {tp: e for tp, e in ends.items() if not (no_end and tp == TP1)}
        groups = [
            group("simple", dict(committed), state="Empty", kind=GroupKind.SIMPLE, members=0),
            group("members", dict(committed), subscribed=("orders", "audit")),
        ]
        if kind == "unreadable":
            groups[0] = replace(groups[0], error="coordinator not available")
        snap = snapshot(t, groups, poll_ends, error="down" if kind == "failed" else None)
        a, b = fast.step(snap), general.step(snap)
        assert [(f.key, f.severity, f.summary) for f in a.findings] == [
            (f.key, f.severity, f.summary) for f in b.findings
        ]
        assert a.held == b.held
        assert all(f.key == alert_key(f.rule, f.labels) for f in a.findings)  # the rules pass the key they built
        for measure in a.measures.values():
            _assert_topic_figures_agree_with_rows(measure)


def _assert_topic_figures_agree_with_rows(m: GroupMeasure) -> None:
    """measure_group takes each topic's figures in its one pass over the partitions: they must be what the
    partition rows say (rows grouped by topic in order, the worst known lag in seconds, any estimate, or any row
    whose records wait for an unknown time: the topic's figure is then a lower bound too)."""

    def in_doubt(r: PartitionMeasure) -> bool:
        p = r.partition
        waits = p.committed is not None and p.log_end is not None and p.committed < p.log_end and p.lag != 0
        return r.lag_time.estimated or (waits and r.lag_time.seconds is None)

    by_topic: dict[str, list[PartitionMeasure]] = {}
    for row in m.partitions:
        by_topic.setdefault(row.partition.topic, []).append(row)
    assert {t: list(rows) for t, rows in m.by_topic.items()} == by_topic
    assert [t.topic for t in m.lag.topics] == list(by_topic)
    for topic, rows in by_topic.items():
        known = [r.lag_time.seconds for r in rows if r.lag_time.seconds is not None]
        worst = dict(zip([t.topic for t in m.lag.topics], m.topic_lag_seconds, strict=True))
        assert worst[topic] == (max(known) if known else None)
        estimated = dict(zip([t.topic for t in m.lag.topics], m.topic_estimated, strict=True))
        assert estimated[topic] == any(in_doubt(r) for r in rows)
    everything = [r.lag_time.seconds for r in m.partitions if r.lag_time.seconds is not None]
    assert m.max_lag_seconds == (max(everything) if everything else None)
    assert m.lag_seconds_estimated == any(in_doubt(r) for r in m.partitions)


def test_a_stopped_simple_group_is_found_through_aligned_windows() -> None:
    """The common case takes the aligned path (the property above is not vacuous): a simple group that stopped
    committing while records kept coming is `stopped`, read from array slices alone."""
    answers: list[bool] = []

    class Counting(ClusterHistory):
        def aligned_group_lags(self, *args: object):  # type: ignore[no-untyped-def]
            got = super().aligned_group_lags(*args)  # type: ignore[arg-type]
            answers.append(got is not None)
            return got

        def window(self, *args: object):  # type: ignore[no-untyped-def]
            raise AssertionError("the Sample path was taken")

    p = Pipeline({"stopped": {"window_s": 120, "for_s": 0}, "expiry": {"enabled": False}})
    p.history = p.pipeline.history = Counting("c", max_gap_s=90.0)
    for i in range(12):
        evaluation = p.step(
            snapshot(
                i * 30,
                [group("s", {TP: 5, TP1: 7}, state="Empty", kind=GroupKind.SIMPLE, members=0)],
                {TP: 10 + i, TP1: 9 + i},
            )
        )
    assert "stopped" in rules_of(evaluation) and answers and all(answers[-2:])


def test_the_history_keeps_the_polls_of_the_longest_window() -> None:
    """The rings are sized to the longest window any rule reads, overrides included, at the poll interval."""
    from lagwatch.history import polls_to_keep
    from lagwatch.rules import RulesConfig

    default = RulesConfig()
    assert default.longest_window_s() == 600  # falling_behind and the rate window
    assert polls_to_keep(default.longest_window_s(), 30) == 22  # a third of the 64 kept before: 8 bytes a poll each
    long = RulesConfig.model_validate(
        {"overrides": [{"match": {"group": "batch-.*"}, "rules": {"stalled": {"window_s": 2400}}}]}
    )
    assert long.longest_window_s() == 2400 and polls_to_keep(2400, 30) == 82
    assert polls_to_keep(10, 30) == 8  # never fewer than a few polls


def test_a_window_longer_than_64_polls_is_judged() -> None:
    """A stalled window of 40 minutes at 30 s polls reads 81 polls. With the 64 polls every history used to keep,
    the window was never covered and the rule never fired, silently; sized to the rules, it fires."""
    from lagwatch.history import polls_to_keep

    rules = {
        "stalled": {"window_s": 2400, "for_s": 0, "learn_commit_interval": False},
        "expiry": {"enabled": False},
        "lag": {"enabled": False},
    }
    fired = {}
    for keep in (64, polls_to_keep(2400, 30)):
        p = Pipeline(rules)
        p.history.keep = keep
        for i in range(100):  # a member holds the partition, commits nothing, records keep coming
            evaluation = p.step(snapshot(i * 30, [group(committed={TP: 5})], {TP: 10 + i}))
        fired[keep] = "stalled" in rules_of(evaluation)
    assert fired == {64: False, 82: True}


def test_a_rewind_of_several_partitions_lists_them_in_order() -> None:
    """The summary and the details name the partitions in order, however the history came to see them (the
    order was the hash order of a set, different after every restart)."""
    tps = [TopicPartition("orders", p) for p in (7, 2, 11, 0, 5)]
    p = Pipeline({"rewind": {"window_s": 60}})
    p.step(snapshot(0, [group(committed=dict.fromkeys(tps, 500))], dict.fromkeys(tps, 500)))
    evaluation = p.step(
        snapshot(30, [group(committed={tp: 100 + tp.partition for tp in tps})], dict.fromkeys(tps, 500))
    )
    (finding,) = [f for f in evaluation.findings if f.rule == "rewind"]
    assert "(0: 500 -> 100, 2: 500 -> 102, 5: 500 -> 105, 7: 500 -> 107, 11: 500 -> 111)" in finding.summary
    assert [row["partition"] for row in finding.details["partitions"]] == [0, 2, 5, 7, 11]  # type: ignore[index,attr-defined]


def test_a_kip848_regex_subscribers_assigned_topic_never_expires() -> None:
    """A KIP-848 member subscribed by regex lists no topic names; its assigned quiet topic counted as unsubscribed:
    expiry warned, then critical, on offsets Kafka keeps."""
    p = Pipeline({"lag": {"enabled": False}, "stalled": {"enabled": False}})
    for t in range(0, 3600, 30):
        g = group(committed={TP: 3}, kind=GroupKind.CONSUMER, subscribed=(), assigned=(TP,))
        evaluation = p.step(snapshot(float(t), [g], {TP: 3}, retention_minutes=10))
        assert "expiry" not in rules_of(evaluation), t


def test_a_kip848_regex_subscribers_topic_between_members_never_expires() -> None:
    """A KIP-848 member's pattern subscribes it to every topic matched whole, and Kafka keeps those offsets. While a
    partition moved between members (assigned to no one at a poll), its quiet topic counted as unsubscribed: the
    old commit was warned expiring, critical. The pattern is read now; a topic it does not match still warns."""
    other = TopicPartition("audit", 0)
    p = Pipeline({"lag": {"enabled": False}, "stalled": {"enabled": False}, "no_commit": {"enabled": False}})
    found = []
    for t in range(0, 3600, 30):
        moving = (t // 30) % 4 == 3  # one poll in four: the partition between members
        g = replace(
            group(
                committed={TP: 3, other: 1}, kind=GroupKind.CONSUMER, subscribed=(), assigned=() if moving else (TP,)
            ),
            members=(Member("m0", "c0", "/h", () if moving else (TP,), (), subscribed_regex="ord.*|pay.*"),),
        )
        evaluation = p.step(snapshot(float(t), [g], {TP: 3, other: 1}, retention_minutes=10))
        found += [f for f in evaluation.findings if f.rule == "expiry"]
    assert found and {part["topic"] for f in found for part in f.details["partitions"]} == {"audit"}  # type: ignore[attr-defined]


def test_a_subscription_pattern_is_matched_whole_as_the_broker_does() -> None:
    """Kafka matches a KIP-848 pattern against the whole topic name (RE2J `matches()`); a pattern RE2 does not
    take counts as subscribing (lagwatch cannot tell, and a false expiry page is the worse error)."""
    tps = [TopicPartition(t, 0) for t in ("orders", "orders-dlq", "xorders")]
    member = Member("m", "c", "/h", (), (), subscribed_regex="orders")
    g = GroupSnapshot("g", "Stable", "consumer", GroupKind.CONSUMER, 1, members=(member,))
    assert g.unsubscribed(tps) == tps[1:]
    prefixed = replace(g, members=(replace(member, subscribed_regex="orders.*"),))
    assert prefixed.unsubscribed(tps) == [tps[2]]
    rejected = replace(g, members=(replace(member, subscribed_regex="(?<=x)orders"),))
    assert rejected.unsubscribed(tps) == []


@given(
    warning=st.sampled_from([{"offsets": 100}, {"seconds": 300}, {"offsets": 100, "seconds": 300}]),
    critical=st.sampled_from([{"offsets": 1000}, {"seconds": 1800}, {"offsets": 1000, "seconds": 1800}]),
    active=st.sampled_from(["warning", "critical"]),
    records=st.integers(min_value=1, max_value=2000),
    seconds=st.one_of(st.none(), st.floats(min_value=0, max_value=3600)),
)
def test_a_lag_in_seconds_in_doubt_never_resolves_an_alert_it_might_justify(
    warning: dict, critical: dict, active: str, records: int, seconds: float | None
) -> None:
    """Lag in seconds unknown, or only a lower bound, with records behind: a firing lag alert is kept at a level
    some threshold on seconds could justify, never resolved while any threshold is on seconds (warning on records
    and critical on seconds: the warning resolved on unknown seconds that might yet prove a critical)."""
    from lagwatch.rules.settings import LagRule
    from lagwatch.rules.thresholds import _kept_in_doubt, lag_severity

    assume("seconds" in warning or "seconds" in critical)  # on records alone, the records decide
    rule = LagRule.model_validate({"warning": warning, "critical": critical})
    severity = lag_severity(rule, records, seconds, active)
    kept = _kept_in_doubt(rule, active, severity, records, seconds, estimated=True)
    final = kept or severity
    assert final is not None
    rank = {"warning": 1, "critical": 2}
    assert rank[final] <= max(rank[active], rank[severity or "warning"])  # doubt never raises it


def _member(member_id: str, *tps: TopicPartition) -> Member:
    return Member(member_id, f"client-{member_id}", "/127.0.0.1", tps, ("orders",))


def test_a_slow_member_working_through_its_partitions_in_turns_is_not_stalled() -> None:
    """The demo's slow consumer reads 10 records a second of 20, one partition's backlog at a time: the others wait
    their turn, minutes at a time (70 to 240 s measured at a 60-s window), while the member commits on the one it
    reads. A slow consumer, not a hung one: `falling_behind`, never `stalled` (it flapped, critical, three times in
    ten minutes). Two members, the one whose partition waits while the other reads is hung: paged."""
    tps = [TopicPartition("orders", i) for i in range(3)]
    config = {"stalled": {"window_s": 60}, "falling_behind": {"window_s": 60}, "lag": {"enabled": False}}
    one, two = Pipeline(config), Pipeline(config)
    committed = dict.fromkeys(tps, 0)
    found_one, found_two = set(), set()
    for i in range(3 * 120):  # three hours at 10-s polls: past the first hour's learning
        t = i * 10
        ends = {tp: 70 * i for tp in tps}  # 7 records a second on each partition, 21 in all
        turn = tps[(i // 24) % 3]  # four minutes on one partition, then the next
        committed[turn] = min(ends[turn], committed[turn] + 100)  # 10 records a second, on that one only
        unfair = replace(group(committed=dict(committed)), members=(_member("m0", *tps),))
        found_one |= set(rules_of(one.step(snapshot(t, [unfair], ends))))
        hung_committed = {tps[0]: 70 * i - 50, tps[1]: 70 * i - 50, tps[2]: 100}  # m1's partition never moves
        hung = replace(group(committed=hung_committed), members=(_member("m0", *tps[:2]), _member("m1", tps[2])))
        found_two |= set(rules_of(two.step(snapshot(t, [hung], ends))))
    assert "falling_behind" in found_one and "stalled" not in found_one
    assert "stalled" in found_two


def _one_partition_at_a_time(
    consume_per_s: int, partitions: int = 4, first_commit_every: int = 1
) -> tuple[Pipeline, float | None]:
    """A consumer of `partitions` partitions (10 records/s each) that commits one partition per poll, in turn:
    the lag of each drops at its own commit. Partition k gets its first commit at poll k * `first_commit_every`."""
    tps = [TopicPartition("orders", p) for p in range(partitions)]
    p = Pipeline({"falling_behind": {"window_s": 300}, "stalled": {"enabled": False}, "stopped": {"enabled": False}})
    committed: dict[TopicPartition, int] = {}
    fired = None
    for i in range(60):
        t = i * 15
        tp = tps[i % partitions]
        if i >= tp.partition * first_commit_every:
            committed[tp] = consume_per_s * t
        p.step(snapshot(t, [group(committed=dict(committed), assigned=tuple(tps))], {tp: 10 * t for tp in tps}))
        if fired is None and "falling_behind" in p.firing():
            fired = t
    return p, fired


@pytest.mark.parametrize(
    ("partitions", "first_commit_every"),
    [(4, 1), (1, 1)],
    ids=["first commits in turn", "one partition committed every poll"],
)
def test_falling_behind_of_a_consumer_committing_one_partition_at_a_time_fires_when_its_window_is_covered(
    partitions: int, first_commit_every: int
) -> None:
    # Summed over the partitions committed throughout the window, the alert was held until the window passed the
    # last one's first commit (45 s late): each partition now joins the sums at its first commit.
    _, fired = _one_partition_at_a_time(8, partitions, first_commit_every)
    assert fired == 300


@pytest.mark.parametrize(("partitions", "first_commit_every"), [(4, 1), (4, 3), (1, 1)])
def test_a_consumer_keeping_up_one_partition_at_a_time_is_not_falling_behind(
    partitions: int, first_commit_every: int
) -> None:
    p, fired = _one_partition_at_a_time(10, partitions, first_commit_every)
    assert fired is None and p.sent == []
