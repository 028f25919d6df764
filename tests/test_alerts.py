"""The alert lifecycle: pending/firing/resolved, grouping and timing, silences, and restarts without duplicates."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.alerts import AlertBook, AlertsConfig, Notification
from lagwatch.model import Finding


def finding(
    rule: str = "lag", group: str = "g", severity: str = "warning", for_s: float = 0, topic: str = "t"
) -> Finding:
    labels = {"cluster": "c", "group": group, "topic": topic}
    return Finding(rule, severity, "c", group, labels, f"{rule} on {group}", {"lag": 1}, for_s)


def book(**cfg: object) -> AlertBook:
    base = {"group_wait_s": 30, "group_interval_s": 300, "repeat_interval_s": 3600}
    return AlertBook(AlertsConfig.model_validate(base | cfg))


def due(b: AlertBook, now: float) -> list[Notification]:
    """The notifications due now, each delivered at once (as a dispatcher that succeeds does)."""
    notes = b.due(now)
    for n in notes:
        b.delivered(n)
    return notes


def step(b: AlertBook, findings: list[Finding], now: float, frozen: frozenset[str] | None = frozenset()) -> list[str]:
    b.apply("c", findings, frozen, now)
    return [n.kind for n in due(b, now)]


def test_pending_until_for_then_firing_after_group_wait() -> None:
    b = book()
    assert step(b, [finding(for_s=60)], 0) == []
    assert b.alerts[finding().key].state == "pending"
    assert step(b, [finding(for_s=60)], 60) == []  # firing now, group_wait running
    assert b.alerts[finding().key].state == "firing"
    assert step(b, [finding(for_s=60)], 89) == []
    assert step(b, [finding(for_s=60)], 90) == ["firing"]
    assert step(b, [finding(for_s=60)], 120) == []  # unchanged: nothing until the repeat interval


def test_a_pending_alert_that_goes_away_is_never_announced() -> None:
    b = book()
    step(b, [finding(for_s=60)], 0)
    assert step(b, [], 30) == [] and b.alerts == {} and b.groups == {}


def test_update_when_an_alert_joins_then_resolved_when_all_clear() -> None:
    b = book()
    step(b, [finding()], 0)
    assert step(b, [finding()], 30) == ["firing"]
    assert step(b, [finding(), finding("stalled", severity="critical")], 60) == []  # within group_interval
    notes = (b.apply("c", [finding(), finding("stalled", severity="critical")], frozenset(), 330), due(b, 330))[1]
    assert [n.kind for n in notes] == ["update"] and notes[0].severity == "critical"
    assert [a.rule for a in notes[0].alerts] == ["stalled", "lag"]  # worst first
    assert step(b, [], 400) == []  # resolved, waiting for group_interval
    notes = (b.apply("c", [], frozenset(), 630), due(b, 630))[1]
    assert [n.kind for n in notes] == ["resolved"] and {a.state for a in notes[0].alerts} == {"resolved"}
    assert b.alerts == {} and b.groups == {}


def test_repeat_interval_and_send_resolved_off() -> None:
    b = book(send_resolved=False, group_wait_s=0)
    assert step(b, [finding()], 0) == ["firing"]
    assert step(b, [finding()], 3599) == []
    assert step(b, [finding()], 3600) == ["repeat"]
    assert step(b, [], 4000) == [] and b.alerts == {}


def test_groups_are_per_cluster_and_consumer_group() -> None:
    b = book(group_wait_s=0)
    b.apply("c", [finding(group="a"), finding(group="b"), finding("stalled", group="a")], frozenset(), 0)
    notes = due(b, 0)
    assert sorted((n.group_key, len(n.alerts)) for n in notes) == [("cluster=c|group=a", 2), ("cluster=c|group=b", 1)]


def test_frozen_scope_neither_resolves_nor_fires() -> None:
    b = book(group_wait_s=0)
    step(b, [finding(group="a"), finding(group="b")], 0)
    step(b, [], 10, frozen=None)  # cluster down: every group frozen
    assert {a.state for a in b.alerts.values()} == {"firing"}
    step(b, [], 20, frozen=frozenset({"a"}))  # group a unreadable: only b may resolve
    assert {a.group: a.state for a in b.alerts.values()} == {"a": "firing", "b": "resolved"}


def test_silence_suppresses_until_it_ends() -> None:
    ends = datetime.fromtimestamp(1000, tz=UTC)
    b = book(group_wait_s=0, silences=[{"matchers": {"group": "batch-.*"}, "ends_at": ends, "comment": "maintenance"}])
    b.load_config_silences()
    assert step(b, [finding(group="batch-1")], 0) == []
    assert step(b, [finding(group="batch-1")], 999) == []
    assert step(b, [finding(group="batch-1")], 1000) == ["firing"]


def test_a_silence_on_an_announced_alert_keeps_its_message_and_still_tells_its_end() -> None:
    """Silenced after it was announced: nothing while the silence lasts. Before, the receiver forgot the alert: when
    the silence expired with the alert still firing, it came as a new incident (a second Slack message, the first
    left red for good), and an alert that ended under the silence never got its "resolved"."""
    from lagwatch.alerts import Silence

    b = book(group_wait_s=0)
    assert step(b, [finding()], 0) == ["firing"]
    b.silences.append(Silence("s1", {"group": "g"}, ends_at=1000, created_by="api"))
    for t in (100, 500, 999, 1000, 1300):  # silenced, then the silence over: the same incident, nothing new
        assert step(b, [finding()], t) == [], t
    assert step(b, [finding()], 3600) == ["repeat"]  # repeats where it left off
    b.silences.append(Silence("s2", {"group": "g"}, ends_at=10_000, created_by="api"))
    assert step(b, [finding(severity="critical")], 4000) == []  # worse under the silence: still quiet
    assert step(b, [], 4400) == ["resolved"]  # it ended under the silence: the receiver that had it is told
    assert b.alerts == {} and b.groups == {}
    again = book(group_wait_s=0)  # silenced before it was ever announced: announced when the silence ends
    again.silences.append(Silence("s3", {"group": "g"}, ends_at=1000, created_by="api"))
    assert step(again, [finding()], 0) == [] and step(again, [finding()], 1000) == ["firing"]


def test_an_alert_left_out_of_a_notification_under_its_silence_is_news_when_the_silence_ends() -> None:
    """A notification sent while an alert is silenced shows only the live ones: the silenced alert leaves the
    receiver's view with it, told as ended and marked muted (left out without a word, a receiver that keeps alerts
    by key had it firing for good). When its silence ends and it still fires, it is news: an update of the message
    (it was dropped from it), or a new incident once the message said "resolved"."""
    from lagwatch.alerts import Silence

    stalled = finding("stalled", severity="critical")
    b = book(group_wait_s=0)
    assert step(b, [stalled, finding()], 0) == ["firing"]
    b.silences.append(Silence("s1", {"rule": "stalled"}, ends_at=3600, created_by="api"))
    notes = (b.apply("c", [stalled, finding(severity="critical")], frozenset(), 900), due(b, 900))[1]
    assert [n.kind for n in notes] == ["update"]
    assert [(a.rule, a.state, a.muted) for a in notes[0].alerts] == [
        ("lag", "firing", False),
        ("stalled", "resolved", True),
    ]
    notes = (b.apply("c", [stalled, finding(severity="critical")], frozenset(), 3600), due(b, 3600))[1]
    assert [n.kind for n in notes] == ["update"] and sorted(a.rule for a in notes[0].alerts) == ["lag", "stalled"]

    again = book(group_wait_s=0)
    assert step(again, [stalled, finding()], 0) == ["firing"]
    again.silences.append(Silence("s2", {"rule": "stalled"}, ends_at=3600, created_by="api"))
    assert step(again, [stalled], 900) == ["resolved"]  # lag ended: the message says the group resolved
    assert step(again, [stalled], 3600) == ["firing"]  # still firing when the silence ends: a new incident


def test_restart_from_saved_state_sends_no_duplicate(tmp_path: Path) -> None:
    from lagwatch.notify import Outbox
    from lagwatch.state.db import StateDatabase

    b = book(group_wait_s=0)
    assert step(b, [finding()], 0) == ["firing"]
    db = StateDatabase(tmp_path).open()  # saved as the daemon saves it, read back as after a restart
    db.save(b, Outbox())
    db.close()
    saved = StateDatabase(tmp_path).open().load_alerts()["book"]
    again = AlertBook.from_json(b.config, saved)
    assert step(again, [finding()], 30) == []  # same alert, already announced
    assert step(again, [], 400) == ["resolved"]  # and it resolves as one would expect


def test_inhibition_matches_on_equal_labels_and_costs_one_lookup_per_alert() -> None:
    """stopped on a group hides that group's stalled only (not another group's), an alert never inhibits itself
    (a rule matching both sides), and at 3,000 firing alerts the notifications are worked out in well under a
    second (the pairwise check it replaces took 12-23 s at this size)."""
    import time

    rules = [
        {"source": {"rule": "stopped"}, "target": {"rule": "stalled"}},
        {"source": {"rule": "lag"}, "target": {"rule": "lag"}, "equal": ["cluster", "group", "topic"]},
    ]
    b = book(group_wait_s=0, group_interval_s=0, storm_threshold=100_000, inhibit_rules=rules)
    findings = [finding("stopped", "a"), finding("stalled", "a"), finding("stalled", "b"), finding("lag", "a")]
    findings += [finding("stalled", f"x{i}") for i in range(1000)] + [finding("stopped", f"x{i}") for i in range(1000)]
    findings += [finding("lag", f"x{i}") for i in range(1000)]
    b.apply("c", findings, frozenset(), 0.0)
    started = time.perf_counter()
    sent = due(b, 0.0)
    elapsed = time.perf_counter() - started
    rules_of = {n.group_labels["group"]: sorted(a.rule for a in n.firing) for n in sent}
    assert rules_of["a"] == ["lag", "stopped"]  # stalled hidden by stopped; lag is its only source: not itself
    assert rules_of["b"] == ["stalled"]  # no stopped in group b
    assert all(rules_of[f"x{i}"] == ["lag", "stopped"] for i in range(1000))
    assert elapsed < 2.0, f"due() took {elapsed:.1f} s for 3,004 firing alerts"


MATCHERS = st.dictionaries(
    st.sampled_from(["rule", "severity", "group"]),
    st.sampled_from(["stopped|stalled", "lag", "warning", "a", ".*"]),
    min_size=1,
    max_size=2,
)


@given(
    alerts=st.lists(
        st.tuples(
            st.sampled_from(["stopped", "stalled", "lag"]),
            st.sampled_from(["warning", "critical"]),
            st.sampled_from(["a", "b"]),
        ),
        max_size=12,
    ),
    rules=st.lists(st.tuples(MATCHERS, MATCHERS, st.sampled_from([[], ["group"]])), min_size=1, max_size=3),
)
def test_inhibition_by_rule_and_severity_answers_as_matching_each_alert(
    alerts: list[tuple[str, str, str]], rules: list[tuple[dict[str, str], dict[str, str], list[str]]]
) -> None:
    """Rules whose matchers read only `rule` and `severity` are matched once per kind of firing alert: the same
    answers as matching every alert against every rule, whatever the rules read."""
    from lagwatch.alerts import Alert, AlertState
    from lagwatch.alerts.muting import inhibited, inhibitors
    from lagwatch.alerts.settings import InhibitRule
    from lagwatch.model import SEVERITY_OF

    firing = [
        Alert(
            key=f"{rule}|{group}|{i}",
            rule=rule,
            severity=SEVERITY_OF[severity],
            cluster="c",
            group=group,
            labels={"cluster": "c", "group": group},
            summary="",
            details={},
            runbook_url=None,
            for_s=0.0,
            state=AlertState.FIRING,
            started_at=0.0,
            updated_at=0.0,
        )
        for i, (rule, severity, group) in enumerate(alerts)
    ]
    inhibit = [InhibitRule(source=source, target=target, equal=equal) for source, target, equal in rules]
    index = inhibitors(inhibit, firing)

    def by_hand(a: Alert) -> bool:
        return any(
            a.matches(r.target.items())
            and any(
                s is not a and s.matches(r.source.items()) and all(s.labels.get(n) == a.labels.get(n) for n in r.equal)
                for s in firing
            )
            for r in inhibit
        )

    assert [inhibited(a, index) for a in firing] == [by_hand(a) for a in firing]


LABEL_NAMES = ["cluster", "group", "topic", "rule", "severity", "team"]
VALUES = ["", "a", "b", "lag", "stopped", "warning", "critical"]
PATTERNS = ["", "a", "a|b", ".*", "lag|stalled", "warn.*", "[a-c]", "critical"]


@given(
    labels=st.dictionaries(st.sampled_from(LABEL_NAMES), st.sampled_from(VALUES), max_size=5),
    rule=st.sampled_from(VALUES),
    severity=st.sampled_from(VALUES),
    matchers=st.dictionaries(st.sampled_from(LABEL_NAMES), st.sampled_from(PATTERNS), max_size=4),
)
def test_an_alert_matches_as_its_matchable_labels_do(
    labels: dict[str, str], rule: str, severity: str, matchers: dict[str, str]
) -> None:
    """Silences, routes and inhibition match an alert without building its label dict: the same answers as
    matching the dict (where `rule` and `severity` win over labels of those names)."""
    from lagwatch.alerts import Alert
    from lagwatch.matchers import labels_match

    alert = Alert("k", rule, severity, "c", None, labels, "s", {}, None, 0.0, "firing", 0.0, 0.0)
    as_matched = {**labels, "rule": rule, "severity": severity}
    assert alert.matches(matchers.items()) == labels_match(matchers, as_matched)


def test_an_alert_group_gone_and_back_is_made_again() -> None:
    """The group key each alert belongs to is remembered across polls: a group removed once its alerts resolved
    comes back, with its labels, when the same alert fires again."""
    b = book(group_wait_s=0, group_interval_s=0)
    assert step(b, [finding(group="a")], 0) == ["firing"]
    assert step(b, [], 10) == ["resolved"]
    assert b.groups == {} and b.alerts == {}
    assert step(b, [finding(group="a")], 20) == ["firing"]
    assert b.groups["cluster=c|group=a"].labels == {"cluster": "c", "group": "a"}


def test_group_ids_with_key_separators_are_alerts_of_their_own() -> None:
    """A Kafka group id may hold `|` and `=`: group `a|team=x` and group `a` routed with label team=x once wrote
    the same alert key, so they shared one alert and the second group's stop was never announced."""
    b = book(group_wait_s=0, group_interval_s=0)

    def stopped(labels: dict[str, str]) -> Finding:
        return Finding("stopped", "critical", "c", labels["group"], labels, f"{labels['group']} stopped")

    odd = stopped({"cluster": "c", "group": "a|team=x"})
    routed = stopped({"cluster": "c", "group": "a", "team": "x"})
    assert odd.key != routed.key
    assert step(b, [odd], 0) == ["firing"]
    notes = (b.apply("c", [routed], frozenset(), 10), due(b, 10))[1]
    by_group = {n.group_labels["group"]: n.kind for n in notes}
    assert by_group == {"a|team=x": "resolved", "a": "firing"}
    assert {a.group for a in b.alerts.values() if a.state == "firing"} == {"a"}
    # Escaped, not dropped: a backslash, `|` or `=` in a value, or a name, still makes a key of its own.
    keys = {stopped({"cluster": "c", "group": g}).key for g in ("a\\|b", "a|b", "a\\", "a=", "a\\=", "a")}
    assert len(keys) == 6


def test_an_announced_alert_that_comes_back_pending_and_goes_gets_its_resolved() -> None:
    """Fired and announced; resolved within group_interval (its resolve held back); its condition back, so pending
    again under `for`; gone again while pending. The receiver, which still has it as firing, is told it resolved
    (it was dropped with the pending alert, and the receiver never heard of it again)."""
    b = book()
    f = finding(for_s=60)
    sent = []
    for t, found in [(0, [f]), (60, [f]), (90, [f]), (120, []), (150, [f]), (180, []), (400, []), (700, [])]:
        sent += [(t, kind) for kind in step(b, found, t)]
    assert sent == [(90, "firing"), (400, "resolved")]
    assert b.alerts == {} and b.groups == {}
    # Still pending when group_interval is over: the resolve goes out then (a pending alert is not firing)...
    b = book()
    sent = []
    for t, found in [(0, [f]), (60, [f]), (90, [f]), (120, []), (380, [f]), (400, [f]), (440, [f]), (500, [f])]:
        sent += [(t, kind) for kind in step(b, found, t)]
    # ...and once its `for` is over (440), it fires anew, announced after group_wait.
    assert sent == [(90, "firing"), (400, "resolved"), (500, "firing")]


def test_a_receiver_not_routed_the_inhibiting_alert_is_told_the_end() -> None:
    """`oncall` takes everything, `team-chat` only `stalled`. `stopped` comes and inhibits `stalled`: `oncall`'s
    message becomes `stopped`; `team-chat`, routed nothing of it, forgot `stalled` and never heard of its end:
    its message stayed firing for good. An inhibited alert stays the receiver's, and its end is told; `oncall`,
    sent an update while it is inhibited, is told there that it ended, marked muted (its webhook or Alertmanager
    kept it firing otherwise)."""
    from lagwatch.alerts import Receiver

    b = book(
        group_wait_s=0,
        group_interval_s=0,
        inhibit_rules=[{"source": {"rule": "stopped"}, "target": {"rule": "stalled"}, "equal": ["group"]}],
    )
    b.receivers = (Receiver("oncall"), Receiver("team-chat", matchers=(("rule", "stalled"),)))

    def sent(findings: list[Finding], now: float) -> list[tuple[str, str, list[str]]]:
        b.apply("c", findings, frozenset(), now)
        return [(n.receiver, n.kind, [a.rule for a in n.alerts]) for n in due(b, now)]

    stalled, stopped = finding("stalled", topic=""), finding("stopped", topic="")
    assert sent([stalled], 0) == [("oncall", "firing", ["stalled"]), ("team-chat", "firing", ["stalled"])]
    b.apply("c", [stalled, stopped], frozenset(), 60)
    assert [(n.receiver, n.kind, [(a.rule, a.state, a.muted) for a in n.alerts]) for n in due(b, 60)] == [
        ("oncall", "update", [("stopped", "firing", False), ("stalled", "resolved", True)])
    ]
    assert sent([stalled, stopped], 120) == []  # muted for team-chat: no news while it is inhibited
    assert sent([stopped], 180) == [("team-chat", "resolved", ["stalled"])]
    assert sent([], 240) == [("oncall", "resolved", ["stopped"])]
    assert b.groups == {}


def test_group_by_rule_groups_by_the_rule_and_severity_is_refused() -> None:
    """`rule` is no label: in group_by it grouped nothing (every group key said `rule=`). It groups by the rule,
    as routes and silences take it. `severity` changes while an alert fires: refused, with the field named."""
    import pytest
    from pydantic import ValidationError

    b = book(group_wait_s=0, group_interval_s=0, group_by=["cluster", "group", "rule"])
    b.apply("c", [finding("stalled", topic=""), finding("stopped", topic="")], frozenset(), 0)
    b.receivers = ()
    assert sorted(b.group_key(a)[0] for a in b.alerts.values()) == [
        "cluster=c|group=g|rule=stalled",
        "cluster=c|group=g|rule=stopped",
    ]
    with pytest.raises(ValidationError, match="group_by"):
        AlertsConfig.model_validate({"group_by": ["cluster", "severity"]})


def test_relabelled_alerts_end_their_old_labels_for_every_receiver_told_and_go_on_at_once() -> None:
    """A label (team) that the configuration now gives otherwise, used in group_by and in a route. The old labels
    end for every receiver told of them (a receiver routed only the old team, an Alertmanager keyed on labels);
    the alert goes on under the new ones, firing at once, at its severity (its `for` is not waited out again)."""
    from lagwatch.alerts import Receiver

    b = book(group_wait_s=0, group_interval_s=0, group_by=["cluster", "group", "team"])
    b.receivers = (Receiver("all"), Receiver("pay", matchers=(("team", "payments"),)))
    old = Finding("stopped", "critical", "c", "g", {"cluster": "c", "group": "g", "team": "payments"}, "s", {}, 60)
    b.apply("c", [old], frozenset(), 0)
    b.apply("c", [old], frozenset(), 60)
    assert [(n.receiver, n.kind) for n in due(b, 60)] == [("all", "firing"), ("pay", "firing")]
    billing = {"cluster": "c", "group": "g", "team": "billing"}
    moved = b.relabel(lambda a: (billing, "|" + "|".join(f"{k}={v}" for k, v in sorted(billing.items()))), 100)
    assert moved == 1
    sent = sorted((n.receiver, n.kind, n.group_labels["team"]) for n in due(b, 100))
    assert sent == [("all", "firing", "billing"), ("all", "resolved", "payments"), ("pay", "resolved", "payments")]
    (alert,) = [a for a in b.alerts.values() if a.state != "resolved"] or [None]
    assert alert is not None and alert.state == "firing" and alert.severity == "critical" and alert.fired_at == 60


def test_labels_changed_and_changed_back_carry_the_incident_on() -> None:
    """Two restarts within group_interval: team added, then removed. The first labels' end was still owed (a
    resolved alert under them): the second change skipped the alert, whose incident then resolved and paged again
    after its `for`. It goes back to them, firing, its end no longer owed."""
    from lagwatch.alerts import Receiver

    b = book(group_wait_s=0, group_interval_s=300)
    b.receivers = (Receiver("all"),)
    f = Finding("stopped", "critical", "c", "g", {"cluster": "c", "group": "g"}, "s", {}, 60)
    b.apply("c", [f], frozenset(), 0)
    b.apply("c", [f], frozenset(), 60)
    assert [n.kind for n in due(b, 60)] == ["firing"]
    team = {"cluster": "c", "group": "g", "team": "pay"}

    def suffix(labels: dict[str, str]) -> str:
        return "|" + "|".join(f"{k}={v}" for k, v in sorted(labels.items()))

    assert b.relabel(lambda a: (team, suffix(team)), 100) == 1
    assert b.relabel(lambda a: (f.labels, suffix(dict(f.labels))), 120) == 1
    firing = [a for a in b.alerts.values() if a.state == "firing"]
    assert [(a.labels, a.fired_at) for a in firing] == [({"cluster": "c", "group": "g"}, 60)]


def test_slack_shows_an_alert_that_left_the_message_under_a_mute_as_muted_not_resolved() -> None:
    from lagwatch.alerts import Silence
    from lagwatch.notify import render

    stalled = finding("stalled", severity="critical")
    b = book(group_wait_s=0)
    assert step(b, [stalled, finding()], 0) == ["firing"]
    b.silences.append(Silence("s1", {"rule": "stalled"}, ends_at=3600, created_by="api"))
    b.apply("c", [stalled, finding(severity="critical")], frozenset(), 900)
    text = str(render.blocks(due(b, 900)[0], None))
    assert "*stalled* (:zzz: muted)" in text and "resolved" not in text
    # lag ends while stalled is silenced, nothing sent in between: the thread reply and the fallback text do not
    # call stalled resolved
    b = book(group_wait_s=0)
    assert step(b, [stalled, finding()], 0) == ["firing"]
    b.silences.append(Silence("s1", {"rule": "stalled"}, ends_at=3600, created_by="api"))
    b.apply("c", [stalled], frozenset(), 900)
    (done,) = due(b, 900)
    assert done.kind == "resolved"
    assert render.thread_text(done) == ":white_check_mark: Resolved: lag; :zzz: muted: stalled"
    assert "(lag)" in render.fallback_text(done)


def test_a_repeat_that_tells_of_a_muted_alerts_end_is_not_dropped_as_stale() -> None:
    """The outbox drops a queued repeat when a newer notification of its group waits behind it ("still firing"
    says nothing the newer one does not). A repeat may now also tell that an alert muted since has ended: dropped,
    that end was told nowhere, and the receiver kept the alert firing for good."""
    from lagwatch.alerts import Silence
    from lagwatch.notify import Outbox

    b = book(group_wait_s=0, group_interval_s=300, repeat_interval_s=3600)
    outbox = Outbox()
    received: list[tuple[str, str]] = []

    def tick(findings: list[Finding], now: float, deliver: bool) -> None:
        b.apply("c", findings, frozenset(), now)
        outbox.add(b.due(now), ["default"])
        for d in outbox.due(now) if deliver else []:
            received.extend((a.rule, a.state) for a in d.notification.alerts)
            outbox.done(d, None)
            b.delivered(d.notification)

    stalled, lag = finding("stalled"), finding()
    tick([stalled, lag], 0, True)
    b.silences.append(Silence("s1", {"rule": "stalled"}, ends_at=10**9, created_by="api"))
    tick([stalled, lag], 3600, False)  # the repeat (stalled ended, muted) waits: the receiver is down
    tick([stalled, finding(severity="critical")], 3900, True)  # an update queued behind it; the receiver is back
    assert ("stalled", "resolved") in received and outbox.collapsed == 0


def test_every_notifier_says_muted_for_an_alert_that_is_only_inhibited(caplog: object) -> None:
    """The demo's log notifier printed `(resolved, warning)` for `stalled` inhibited by `stopped`, then `(firing)`
    again when the inhibition ended: a new user read that the incident had ended. Slack said muted; now the log
    and the webhook body say the same."""
    import logging

    import pytest

    from lagwatch.notify import render
    from lagwatch.notify.log import LogNotifier
    from lagwatch.notify.webhook import lagwatch_body

    assert isinstance(caplog, pytest.LogCaptureFixture)
    b = book(
        group_wait_s=0,
        group_interval_s=0,
        inhibit_rules=[{"source": {"rule": "stopped"}, "target": {"rule": "stalled"}, "equal": ["group"]}],
    )
    stalled, stopped = finding("stalled", topic=""), finding("stopped", topic="")
    assert step(b, [stalled], 0) == ["firing"]
    b.apply("c", [stalled, stopped], frozenset(), 60)
    (update,) = due(b, 60)
    caplog.set_level(logging.INFO, logger="lagwatch.alert")
    LogNotifier().send(update, None)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "lagwatch.alert"]
    assert "stalled (muted, warning)" in line and "resolved" not in line
    assert [(a["rule"], a["muted"]) for a in lagwatch_body(update)["alerts"]] == [("stopped", False), ("stalled", True)]
    # A resolution whose every alert left muted is no resolution, in any notifier's words.
    muted_end = dataclasses.replace(update, kind="resolved", alerts=update.alerts[1:])
    assert render.outcome(muted_end) == "muted" and render.fallback_text(muted_end).startswith("[MUTED]")
    caplog.clear()
    LogNotifier().send(muted_end, None)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "lagwatch.alert"]
    assert line.startswith("[MUTED:") and "resolved" not in line


def test_compact_details_and_shared_labels_leave_the_book_as_plain_json() -> None:
    """The book keeps a lag alert's details compactly (LagDetails) and its labels as the finding's own mapping (the
    rules' resolver's, shared): what leaves it (vars() for the state, AlertRecord for notifications) is the same
    plain JSON as a dict of dicts gave, key order included."""
    import json
    from types import MappingProxyType

    from lagwatch.alerts import AlertRecord
    from lagwatch.rules.thresholds import LagDetails

    plain = {
        "lag": 14000,
        "max_lag": 1400,
        "lag_seconds": 840.5,
        "eta_s": None,
        "falling_behind": True,
        "worst_partitions": [
            {"partition": 3, "lag": 1400, "lag_seconds": 840.5},
            {"partition": 0, "lag": 900, "lag_seconds": None},
        ],
    }
    details = LagDetails(14000, 1400, 840.5, None, True, (3, 1400, 840.5, 0, 900, None))
    assert dict(details) == plain and details == plain and plain == details
    assert list(details) == list(plain) and len(details) == len(plain) and "lag" in details and "x" not in details
    assert details.get("lag") == 14000 and details.get("x") is None and repr(details) == repr(plain)
    from lagwatch.rules.progress import StoppedDetails

    stopped = StoppedDetails(14000, "Empty")
    assert json.dumps(dict(stopped)) == json.dumps({"lag": 14000, "state": "Empty"}) and stopped == dict(stopped)
    assert repr(stopped) == repr(dict(stopped)) and stopped.get("state") == "Empty" and "members" not in stopped
    # Packed as machine values only where they read back the same: an int in seconds, an offset past 64 bits.
    for odd in ((3, 7, 840), (3, 2**64, 1.5), (3, True, 1.5)):
        kept = LagDetails(1, 1, None, None, False, odd)["worst_partitions"]
        assert json.dumps(kept) == json.dumps([{"partition": 3, "lag": odd[1], "lag_seconds": odd[2]}])
    labels = MappingProxyType({"cluster": "c", "group": "g", "topic": "t"})
    f = Finding("lag", "warning", "c", "g", labels, "g lags", details)
    b = book(group_wait_s=0)
    b.apply("c", [f], frozenset(), 0.0)
    (alert,) = b.alerts.values()
    assert alert.labels is labels and alert.details is details and alert.lag == 14000
    saved = vars(alert)
    assert type(saved["labels"]) is dict and type(saved["details"]) is dict
    assert list(saved) == [field.name for field in dataclasses.fields(alert)]
    for sort_keys in (True, False):
        as_dicts = {**saved, "labels": dict(labels), "details": plain}
        assert json.dumps(saved, sort_keys=sort_keys) == json.dumps(as_dicts, sort_keys=sort_keys)
    record = AlertRecord.of(alert)
    assert json.dumps(record.to_json()) == json.dumps({**record.to_json(), "labels": dict(labels), "details": plain})
    with pytest.raises(AttributeError):
        alert.other = 1  # type: ignore[attr-defined]  # slotted: no instance dict
