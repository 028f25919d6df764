"""`no_commit`: members assigned a partition on which records arrive, and no committed offset there. Its lag cannot
be measured (kafka-consumer-groups shows "-"), so before this rule a consumer stuck before its first commit paged
nothing at all. Polls every 30 s, the rule's defaults (warning, a 10-minute window), through the pipeline step."""

from __future__ import annotations

from lagwatch.history import polls_to_keep
from lagwatch.model import TopicPartition
from lagwatch.rules import RulesConfig
from tests.synthetic import TP, Pipeline, group, snapshot

INTERVAL = 30.0
SECOND = TopicPartition("orders", 1)
QUIET = {"lag": {"enabled": False}, "stalled": {"enabled": False}}  # the rules that judge committed partitions


def run(polls: int, poll: object, rules: dict | None = None) -> Pipeline:  # type: ignore[type-arg]
    p = Pipeline({**QUIET, **(rules or {})}, max_gap_s=2 * INTERVAL + 5)
    # The rings as the daemon sizes them: 22 polls with the defaults at 30 s (the window's start must be in them).
    p.history.keep = polls_to_keep(RulesConfig.model_validate({**QUIET, **(rules or {})}).longest_history_s(), INTERVAL)
    for i in range(polls):
        p.step(poll(i, i * INTERVAL))  # type: ignore[operator]
    return p


def told(p: Pipeline) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(n.kind, n.severity_text, tuple(sorted(a.rule for a in n.alerts))) for n in p.sent]


def test_a_consumer_stuck_before_its_first_commit_is_paged_after_the_window_and_resolves_once_it_commits() -> None:
    first_commit = 40

    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        committed = {TP: 30 * i} if i >= first_commit else {}
        return snapshot(t, [group("new-app", committed=committed, assigned=(TP,))], {TP: 1000 + 30 * i})

    p = run(60, poll)
    assert told(p) == [("firing", "warning", ("no_commit",)), ("resolved", "resolved", ("no_commit",))], told(p)
    fired, resolved = p.sent
    # Judged once the window is covered: 20 polls of 30 s, the first one at t=0 (the window starts at it).
    assert fired.created_at == 600.0
    assert resolved.created_at == first_commit * INTERVAL
    (alert,) = fired.alerts
    assert alert.labels["topic"] == "orders"
    assert "no committed offset" in alert.summary and "600 records arrived" in alert.summary


def test_only_the_stuck_partition_is_named_and_a_quiet_one_is_not() -> None:
    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        ends = {TP: 1000 + 10 * i, SECOND: 500}  # records arrive on TP only
        return snapshot(t, [group("app", committed={}, assigned=(TP, SECOND))], ends)

    p = run(30, poll)
    assert told(p) == [("firing", "warning", ("no_commit",))]
    assert p.sent[0].alerts[0].details["partitions"] == [0]


def test_nothing_for_quiet_partitions_committed_ones_or_a_partition_handed_over_within_the_window() -> None:
    def quiet(i: int, t: float):  # type: ignore[no-untyped-def]
        return snapshot(t, [group("idle", committed={}, assigned=(TP,))], {TP: 1000})

    def committing(i: int, t: float):  # type: ignore[no-untyped-def]
        return snapshot(t, [group("ok", committed={TP: 1000 + 10 * i}, assigned=(TP,))], {TP: 1000 + 10 * i})

    def handed_over(i: int, t: float):  # type: ignore[no-untyped-def]
        # Assigned to this group's member only for the last 15 polls (a rebalance moved it): not a whole window.
        assigned = (TP,) if i >= 15 else ()
        return snapshot(t, [group("moved", committed={}, assigned=assigned, members=1)], {TP: 1000 + 10 * i})

    for poll in (quiet, committing, handed_over):
        assert told(run(30, poll)) == [], poll.__name__


def test_a_rebalance_mid_incident_holds_the_alert_and_a_group_gone_empty_resolves_after_the_window() -> None:
    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        if i == 30:  # between two generations: no members at this poll
            g = group("stuck", committed={}, state="PreparingRebalance", members=0)
        elif i >= 40:  # every member gone: nothing is assigned, so nothing for this rule
            g = group("stuck", committed={}, state="Empty", members=0)
        else:
            g = group("stuck", committed={}, assigned=(TP,))
        return snapshot(t, [g], {TP: 1000 + 10 * i})

    p = run(70, poll)
    assert told(p) == [("firing", "warning", ("no_commit",)), ("resolved", "resolved", ("no_commit",))], told(p)
    # Not at the rebalance's poll, nor at the first without members (a crash loop's restart looks like that):
    # once the group has been Empty for the window.
    assert p.sent[1].created_at == 40 * INTERVAL + 600


def test_the_rule_can_be_turned_off_or_given_a_window_and_severity() -> None:
    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        return snapshot(t, [group("app", committed={}, assigned=(TP,))], {TP: 1000 + 10 * i})

    assert told(run(30, poll, {"no_commit": {"enabled": False}})) == []
    p = run(30, poll, {"no_commit": {"window_s": 120, "severity": "critical"}})
    assert told(p) == [("firing", "critical", ("no_commit",))]
    assert p.sent[0].created_at == 120.0


def test_a_crash_loop_before_the_first_commit_is_one_incident() -> None:
    """One poll in three sees the group Empty, between a crash and the restart: the alert is held through them."""

    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        if i % 3 == 0:
            g = group("looping", committed={}, state="Empty", members=0)
        else:
            g = group("looping", committed={}, assigned=(TP,))
        return snapshot(t, [g], {TP: 1000 + 10 * i})

    p = run(90, poll)
    assert told(p) == [("firing", "warning", ("no_commit",))], told(p)


def test_rebalance_polls_that_assign_it_to_nobody_hold_the_alert() -> None:
    """Members listed, the partition assigned to none of them at that poll (an eager CompletingRebalance, a
    cooperative hand-over's first round): the alert resolved at each such poll and fired again a poll later."""
    for state in ("CompletingRebalance", "Stable"):

        def poll(i: int, t: float, state: str = state):  # type: ignore[no-untyped-def]
            if i in (60, 120, 180):
                g = group("new-app", committed={}, state=state, members=2, assigned=())
            else:
                g = group("new-app", committed={}, assigned=(TP,), members=2)
            return snapshot(t, [g], {TP: 1000 + 3000 * i})

        assert told(run(240, poll)) == [("firing", "warning", ("no_commit",))], state


def test_a_crash_loop_with_long_back_offs_never_flaps() -> None:
    """Runs of 30 s to 7 minutes (plus the session timeout), then Kubernetes' back-off of 10 s doubling to 300 s,
    for 3 hours: one firing at most, never a resolve while it loops (it resolved when the window's start fell in
    an Empty spell, and fired again later: up to 41 notifications)."""
    for run_s in (30, 60, 120, 240, 420):
        spans, start, k = [], 0.0, 0
        while start < 4 * 3600:
            spans.append((start, start + run_s + 45))
            start += run_s + 45 + ([10, 20, 40, 80, 160][k] if k < 5 else 300)
            k += 1

        def poll(i: int, t: float, spans: list = spans):  # type: ignore[no-untyped-def,type-arg]
            if any(a <= t < b for a, b in spans):
                g = group("looping", committed={}, assigned=(TP,))
            else:
                g = group("looping", committed={}, state="Empty", members=0)
            return snapshot(t, [g], {TP: 1000 + 3000 * i})

        kinds = [kind for kind, _, _ in told(run(360, poll))]
        assert kinds in ([], ["firing"]), (run_s, kinds)


def test_the_alert_resolves_once_the_topic_is_no_longer_subscribed_or_is_deleted() -> None:
    """Stuck before its first commit on `orders`; at 20 minutes a new build drops `orders` from the subscription:
    the partition, never committed, stayed tracked, and its alert was held (assigned to nobody: a hand-over?)
    for good, repeating every 4 hours."""
    payments = TopicPartition("payments", 0)

    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        if t < 1200:
            g = group("app", committed={payments: 3000 * i}, assigned=(TP, payments), subscribed=("orders", "payments"))
        else:
            g = group("app", committed={payments: 3000 * i}, assigned=(payments,), subscribed=("payments",))
        return snapshot(t, [g], {TP: 1000 + 3000 * i, payments: 3000 * i + 50})

    p = run(120, poll)
    assert told(p) == [("firing", "warning", ("no_commit",)), ("resolved", "resolved", ("no_commit",))], told(p)
    assert p.sent[1].created_at <= 1200 + 600 + 30  # once the window has passed without it assigned


def test_kafkas_console_consumer_with_a_made_up_group_is_not_paged() -> None:
    """Given no group, Kafka's console consumer makes one up (`console-consumer-<n>`) and never commits in it (seen
    on Kafka 4.1: Stable, one member, no offset). Someone tailing a busy topic for ten minutes was paged. Such
    groups are ignored by default (`no_commit.ignore_groups`); a group of one's own so named is paged if listed
    no longer."""

    def poll(i: int, t: float):  # type: ignore[no-untyped-def]
        groups = [group(g, committed={}, assigned=(TP,)) for g in ("console-consumer-7132", "console-consumer-app")]
        return snapshot(t, groups, {TP: 1000 + 30 * i})

    p = run(40, poll)
    assert [n.group_labels["group"] for n in p.sent] == ["console-consumer-app"]  # the digits only
    p = run(40, poll, {"no_commit": {"ignore_groups": []}})
    assert sorted(n.group_labels["group"] for n in p.sent) == ["console-consumer-7132", "console-consumer-app"]
