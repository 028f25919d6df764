"""Routes before dedup, and storms: what each receiver is told."""

from __future__ import annotations

import json

from lagwatch.alerts import AlertBook, AlertsConfig, Notification, Receiver
from lagwatch.model import Finding

PAGER = Receiver("pager", min_severity="critical")
CHAT = Receiver("chat")


def finding(group: str, severity: str, rule: str = "lag", cluster: str = "c") -> Finding:
    labels = {"cluster": cluster, "group": group}
    return Finding(rule, severity, cluster, group, labels, f"{group} {rule} {severity}", {"lag": 10})


def book(**config: object) -> AlertBook:
    cfg = {"group_wait_s": 0, "group_interval_s": 0, **config}
    return AlertBook(AlertsConfig.model_validate(cfg), receivers=(PAGER, CHAT))


def due(b: AlertBook, now: float) -> list[Notification]:
    """The notifications due now, each delivered at once (as a dispatcher that succeeds does)."""
    notes = b.due(now)
    for n in notes:
        b.delivered(n)
    return notes


def told(notes: list, receiver: str) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(n.kind, n.severity_text) for n in notes if n.receiver == receiver]


def test_a_receiver_never_gets_a_resolve_for_what_it_never_saw() -> None:
    b = book()
    b.apply("c", [finding("g", "warning")], frozenset(), 0)
    first = due(b, 0)
    b.apply("c", [], frozenset(), 10)
    second = due(b, 10)
    assert told(first, "chat") == [("firing", "warning")] and told(second, "chat") == [("resolved", "resolved")]
    assert told(first + second, "pager") == []


def test_escalation_reaches_the_pager_and_de_escalation_resolves_it_there_only() -> None:
    b = book()
    b.apply("c", [finding("g", "warning")], frozenset(), 0)
    notes = due(b, 0)
    b.apply("c", [finding("g", "critical")], frozenset(), 10)
    notes += due(b, 10)
    b.apply("c", [finding("g", "warning")], frozenset(), 20)
    notes += due(b, 20)
    assert told(notes, "pager") == [("firing", "critical"), ("resolved", "resolved")]
    assert told(notes, "chat") == [("firing", "warning"), ("update", "critical"), ("update", "warning")]


def test_storm_one_summary_per_receiver_then_groups_resolve_one_by_one_quietly() -> None:
    b = book(storm_threshold=5)
    b.apply("c", [finding(f"g{i}", "critical") for i in range(30)], frozenset(), 0)
    notes = due(b, 0)
    assert [(n.receiver, n.kind) for n in notes] == [("pager", "firing"), ("chat", "firing")]
    assert notes[0].storm is not None and notes[0].storm.groups_firing == 30
    assert notes[0].storm.alerts_by_rule == {"lag": 30}
    assert len(b.alerts) == 30  # every group is still tracked
    b.apply("c", [finding(f"g{i}", "critical") for i in range(10)], frozenset(), 60)
    assert due(b, 60) == []  # twenty groups resolved: quiet, the storm is still on
    assert sum(a.state == "firing" for a in b.alerts.values()) == 10
    b.apply("c", [], frozenset(), 120)
    end = due(b, 120)
    assert [(n.receiver, n.kind) for n in end] == [("pager", "resolved"), ("chat", "resolved")]
    assert b.alerts == {} and b.storms == {}


def test_below_the_storm_threshold_each_group_is_told_and_other_clusters_are_apart() -> None:
    b = book(storm_threshold=5)
    b.apply("c", [finding(f"g{i}", "warning") for i in range(5)], frozenset(), 0)
    b.apply("d", [finding(f"h{i}", "warning", cluster="d") for i in range(3)], frozenset(), 0)
    notes = due(b, 0)
    assert len(told(notes, "chat")) == 8 and all(n.storm is None for n in notes)


def test_a_storm_announces_late_joiners_and_worse_groups_after_group_interval_and_repeats() -> None:
    """A group that starts firing within group_interval of the storm's last summary joins quietly: the summary
    after group_interval counts it (it was never announced at all). A member that gets worse is news as well; a
    storm still on is repeated after repeat_interval; groups that resolve leave quietly."""
    b = AlertBook(
        AlertsConfig.model_validate(
            {"group_wait_s": 0, "group_interval_s": 300, "repeat_interval_s": 3600, "storm_threshold": 2}
        ),
        receivers=(CHAT,),
    )
    storm = [finding(f"g{i}", "warning") for i in range(3)]
    late = finding("late", "critical")
    sent: list[tuple[float, str, int, str]] = []

    def poll(t: float, found: list[Finding]) -> None:
        b.apply("c", found, frozenset(), t)
        for n in due(b, t):
            assert n.storm is not None
            sent.append((t, n.kind, n.storm.groups_firing, n.severity_text))

    poll(0, storm)
    poll(60, [*storm, late])  # joins quietly
    poll(290, [*storm, late])
    poll(300, [*storm, late])  # group_interval over: the summary counts it
    worse = [finding("g0", "critical"), *storm[1:], late]
    poll(400, worse)  # g0 got worse, within group_interval of the last summary
    poll(600, worse)
    poll(700, worse[1:])  # g0 resolves: quiet
    poll(4300, worse[1:])  # repeat_interval after the last summary
    assert sent == [
        (0, "firing", 3, "warning"),
        (300, "update", 4, "critical"),
        (600, "update", 4, "critical"),
        (4300, "repeat", 3, "critical"),
    ]


def test_a_receiver_removed_between_restarts_holds_nothing_and_comes_back_fresh() -> None:
    """What a receiver no longer configured was told is let go at restart: its memory kept every alert it saw in
    the book for ever, and it got a resolve for each of them when it was enabled again, a week later."""
    b = book(storm_threshold=100)
    b.apply("c", [finding(f"g{i}", "critical") for i in range(5)], frozenset(), 0)
    assert len(due(b, 0)) == 10  # five groups, to the pager and to the chat
    saved = json.loads(
        json.dumps(
            {
                "sequence": b.sequence,
                "alerts": [vars(a) for a in b.alerts.values()],
                "groups": [vars(g) for g in b.groups.values()],
                "storms": [],
                "silences": [],
            }
        )
    )
    again = AlertBook.from_json(b.config, saved, (CHAT,))  # the pager removed from the configuration
    again.apply("c", [], frozenset(), 100)
    assert [(n.receiver, n.kind) for n in due(again, 100)] == [("chat", "resolved")] * 5
    assert again.alerts == {} and again.groups == {}
    again.receivers = (PAGER, CHAT)  # enabled again later: nothing stale to tell
    assert due(again, 7 * 86400) == []


def test_a_receiver_that_groups_alerts_itself_gets_every_group_in_a_storm() -> None:
    """Alertmanager groups alerts itself: a storm summary carried ten of the groups to it, and never the rest."""
    grouping = Receiver("alertmanager", storms=False)
    b = AlertBook(AlertsConfig.model_validate({"group_wait_s": 0, "storm_threshold": 5}), receivers=(CHAT, grouping))
    b.apply("c", [finding(f"g{i}", "warning") for i in range(15)], frozenset(), 0)
    notes = due(b, 0)
    assert [n.kind for n in notes if n.receiver == "chat"] == ["firing"] and notes[-1].storm is not None
    mine = [n for n in notes if n.receiver == "alertmanager"]
    assert len(mine) == 15 and all(n.storm is None for n in mine)


def test_an_escalation_tells_the_severity_it_replaces_and_a_resolve_the_one_it_ends() -> None:
    b = book()
    b.apply("c", [finding("g", "warning")], frozenset(), 0)
    due(b, 0)
    b.apply("c", [finding("g", "critical")], frozenset(), 10)
    (update,) = [n for n in due(b, 10) if n.receiver == "chat"]
    assert [(a.severity, a.previous_severity) for a in update.alerts] == [("critical", "warning")]
    b.apply("c", [finding("g", "warning")], frozenset(), 20)
    (ended,) = [n for n in due(b, 20) if n.receiver == "pager"]  # below the pager's route now: ended for it
    assert ended.kind == "resolved" and [(a.severity, a.resolved_at) for a in ended.alerts] == [("critical", 20)]


def test_an_update_never_delivered_takes_back_only_what_it_announced() -> None:
    """A was delivered; an update announcing B beside A was refused for good. The receiver still has A: A's
    resolve must still reach it (it was lost when every alert of the update was taken back), and B, which it
    never had, is announced again, not resolved."""
    b = AlertBook(AlertsConfig.model_validate({"group_wait_s": 0, "group_interval_s": 0}), receivers=(CHAT,))
    a, bee = finding("g", "warning"), finding("g", "warning", rule="stalled")
    b.apply("c", [a], frozenset(), 0)
    assert [n.kind for n in due(b, 0)] == ["firing"]
    b.apply("c", [a, bee], frozenset(), 10)
    (update,) = b.due(10)
    b.undelivered([update])  # refused for good
    b.apply("c", [bee], frozenset(), 20)  # A resolves, B still fires
    (again,) = due(b, 20)
    assert again.kind == "update"
    assert sorted((x.rule, x.state) for x in again.alerts) == [("lag", "resolved"), ("stalled", "firing")]


def test_a_storm_summary_never_delivered_is_sent_again_after_group_interval() -> None:
    """A storm's first summary was refused for good: the receiver knows nothing of the storm. The next summary
    comes once group_interval is over, not at the repeat interval, hours later."""
    b = AlertBook(
        AlertsConfig.model_validate(
            {"group_wait_s": 0, "group_interval_s": 300, "repeat_interval_s": 4 * 3600, "storm_threshold": 2}
        ),
        receivers=(CHAT,),
    )
    storm = [finding(f"g{i}", "warning") for i in range(3)]
    b.apply("c", storm, frozenset(), 0)
    (summary,) = b.due(0)
    b.undelivered([summary])
    sent = []
    for t in (100, 200, 300, 400):
        b.apply("c", storm, frozenset(), t)
        sent += [(t, n.kind, n.storm.groups_firing if n.storm else None) for n in due(b, t)]
    assert sent == [(300, "update", 3)]


def test_a_storm_whose_summaries_never_arrived_ends_without_a_resolved() -> None:
    """Its first summary refused for good (`channel_not_found`), the groups caught up: a "[RESOLVED] alert storm"
    was posted as a message of its own, for a storm the channel never saw."""
    b = AlertBook(
        AlertsConfig.model_validate({"group_wait_s": 0, "group_interval_s": 0, "storm_threshold": 2}), receivers=(CHAT,)
    )
    storm = [finding(f"g{i}", "warning") for i in range(3)]
    b.apply("c", storm, frozenset(), 0)
    (summary,) = b.due(0)
    b.undelivered([summary])
    b.apply("c", [], frozenset(), 10)
    assert due(b, 10) == []


def test_a_storms_end_given_up_is_told_again_and_its_reply_says_the_storm() -> None:
    """The storm's "resolved" expired in an outage: nothing was sent after it, and the storm's message stayed red
    for good. Its thread reply was empty, which Slack refuses (`no_text`) at every storm's end."""
    from lagwatch.notify import render

    b = AlertBook(
        AlertsConfig.model_validate({"group_wait_s": 0, "group_interval_s": 0, "storm_threshold": 2}), receivers=(CHAT,)
    )
    storm = [finding(f"g{i}", "warning") for i in range(3)]
    b.apply("c", storm, frozenset(), 0)
    assert [n.kind for n in due(b, 0)] == ["firing"]  # delivered: the storm's message exists
    b.apply("c", [], frozenset(), 10)
    (end,) = b.due(10)
    assert end.kind == "resolved" and end.storm is not None
    assert "every alert group of the storm on c has resolved" in render.thread_text(end)
    b.undelivered([end])  # too old, never delivered
    (again,) = due(b, 20)
    assert again.kind == "resolved" and again.storm is not None and again.group_key == end.group_key
    assert due(b, 30) == []
