"""The alert side's seams on their own: typed records, restart semantics, routing of receivers, the lake's install."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagwatch.alerts import (
    AlertBook,
    AlertRecord,
    AlertsConfig,
    AlertState,
    Notification,
    NotificationKind,
    Receiver,
    Severity,
    restart,
)
from lagwatch.config import load_settings
from lagwatch.errors import ConfigError
from lagwatch.model import Finding
from lagwatch.notify import LogNotifier, receivers_of
from lagwatch.notify.outbox import Outbox
from lagwatch.notify.settings import Route, WebhookConfig
from lagwatch.notify.webhook import WebhookNotifier

NOW = 1_000.0


def finding(group: str, severity: Severity = Severity.WARNING, cluster: str = "c", **labels: str) -> Finding:
    all_labels = {"cluster": cluster, "group": group, **labels}
    return Finding("lag", severity, cluster, group, all_labels, f"{group} lags", {"lag": 10})


def fired_book(*groups: str, cluster: str = "c", deliver: bool = True) -> tuple[AlertBook, list[Notification]]:
    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0))
    book.apply(cluster, [finding(g, cluster=cluster) for g in groups], frozenset(), NOW)
    notes = book.due(NOW)
    for n in notes if deliver else []:
        book.delivered(n)
    return book, notes


def saved(book: AlertBook) -> dict[str, Any]:
    """The book as the state database gives it back: rows of plain JSON."""
    return json.loads(
        json.dumps(
            {
                "sequence": book.sequence,
                "alerts": [vars(a) for a in book.alerts.values()],
                "groups": [vars(g) for g in book.groups.values()],
                "storms": [vars(s) for s in book.storms.values()],
                "silences": [vars(s) for s in book.silences if s.created_by != "config"],
            }
        )
    )


def restore(book: AlertBook, **kwargs: Any) -> restart.Restored:
    args: dict[str, Any] = {
        "now": NOW + 60,
        "lost_state": False,
        "queued": [],
        "unread_queued": [],
        "labels_of": lambda a: (a.labels, "|" + "|".join(f"{k}={v}" for k, v in sorted(a.labels.items()))),
        "clusters": ["c"],
        **kwargs,
    }
    return restart.restore(book.config, saved(book), book.receivers, **args)


def test_a_notification_round_trips_through_its_json_as_typed_records() -> None:
    _, (n,) = fired_book("g")
    raw = json.loads(json.dumps(n.to_json()))
    assert raw["alerts"][0]["first_told"] is True and "muted" not in raw["alerts"][0]  # only what says something
    back = Notification.from_json(raw)
    assert back == n
    assert back.kind is NotificationKind.FIRING and back.alerts[0].state is AlertState.FIRING
    assert back.alerts[0].severity is Severity.WARNING and back.severity is Severity.WARNING


def test_a_queued_row_with_an_unknown_severity_is_set_aside_not_delivered() -> None:
    _, (n,) = fired_book("g")
    good = n.to_json()
    bad = {**good, "id": "x", "alerts": [{**good["alerts"][0], "severity": "apocalyptic"}]}
    odd: list[tuple[str, str, Any]] = []
    outbox = Outbox.from_json(
        {"deliveries": [{"notification": good, "notifier": "log"}, {"notification": bad, "notifier": "log"}]}, odd
    )
    assert [d.notification.id for d in outbox.deliveries] == [n.id]
    assert len(odd) == 1 and "apocalyptic" in odd[0][1]


def test_restore_keeps_firing_alerts_and_what_each_receiver_was_told() -> None:
    book, _ = fired_book("g")
    restored = restore(book)
    again = restored.book
    assert [(a.key, a.state) for a in again.alerts.values()] == [(k, AlertState.FIRING) for k in book.alerts]
    assert again.groups.keys() == book.groups.keys() and restored.rejected == []
    assert again.due(NOW + 60) == []  # nothing new: not announced again


def test_every_start_moves_notification_ids_past_the_clock() -> None:
    """From a state an operator restored from a backup, which nothing on disk tells from the last run's, the ids
    the lost run issued came again (a receiver that takes an id once dropped the new ones as duplicates)."""
    book, _ = fired_book("g")
    assert book.sequence == 1
    assert restore(book, lost_state=True).book.sequence == int((NOW + 60) * 1000)
    assert restore(book, lost_state=False).book.sequence == int((NOW + 60) * 1000)
    book.sequence = int((NOW + 500) * 1000)  # a run that issued ids faster than 1,000 a second: on from there
    assert restore(book, lost_state=False).book.sequence == int((NOW + 500) * 1000)


def test_alerts_of_a_cluster_no_longer_configured_resolve_and_their_end_is_told() -> None:
    book, _ = fired_book("g", cluster="gone")
    restored = restore(book, clusters=["c"])
    assert restored.resolved_clusters == {"gone": 1}
    (n,) = restored.book.due(NOW + 60)
    assert n.kind is NotificationKind.RESOLVED and n.alerts[0].state is AlertState.RESOLVED


def test_alerts_under_labels_the_configuration_now_gives_otherwise_go_on_and_the_old_ones_end() -> None:
    book, _ = fired_book("g")
    restored = restore(book, labels_of=lambda a: ({**a.labels, "team": "a"}, "|new"))
    assert restored.relabelled == 1
    states = {k: a.state for k, a in restored.book.alerts.items()}
    assert states == {next(iter(book.alerts)): AlertState.RESOLVED, "lag|new": AlertState.FIRING}


def test_what_a_receiver_has_is_written_when_the_delivery_succeeds() -> None:
    book, (n,) = fired_book("g", deliver=False)
    group = book.groups[n.group_key]
    assert group.notified == {}  # decided, queued: not the receiver's yet
    assert book.due(NOW + 1) == []  # ... and not decided twice meanwhile
    changed = book.delivered(n)
    assert changed == (n.group_key, group) and group.notified == {"default": {n.alerts[0].key: Severity.WARNING}}
    assert book.delivered(n) is None  # once


def test_a_notification_still_queued_at_a_restart_is_not_decided_again_and_its_delivery_is_recorded() -> None:
    book, (n,) = fired_book("g", deliver=False)
    again = restore(book, queued=[n]).book
    assert again.due(NOW + 60) == []  # it is on its way: no second firing
    again.delivered(n)
    again.apply("c", [], frozenset(), NOW + 120)
    (resolved,) = again.due(NOW + 120)  # the receiver has it: its end is told
    assert resolved.kind is NotificationKind.RESOLVED


def test_a_resolve_given_up_leaves_the_receiver_with_what_it_has_and_is_sent_again() -> None:
    book, (n,) = fired_book("g")  # delivered: the receiver has the alert
    book.apply("c", [], frozenset(), NOW + 10)
    (resolve,) = book.due(NOW + 10)
    assert book.alerts == {}  # its end decided for every receiver: let go
    book.undelivered([resolve])  # refused for good
    (again,) = book.due(NOW + 20)
    assert again.kind is NotificationKind.RESOLVED and again.alerts[0].key == n.alerts[0].key
    book.delivered(again)
    assert book.due(NOW + 30) == [] and book.alerts == {}


def test_a_queued_notification_whose_row_is_unreadable_takes_back_what_it_told() -> None:
    book, (n,) = fired_book("g", deliver=False)
    raw = n.to_json()
    row = {"notification": {**raw, "kind": 7}, "notifier": "default"}  # the row no longer loads
    unread = restart.unread_queued(row)
    assert unread is not None
    restored = restore(book, unread_queued=[unread])
    # The receiver never got the firing: it is announced again (after group_interval, 0 here).
    (again,) = restored.book.due(NOW + 60)
    assert again.kind is NotificationKind.FIRING
    assert restart.unread_queued({"notification": {"alerts": []}, "notifier": "x"}) is None


def test_an_alertmanager_webhook_gets_every_group_and_routes_keep_their_severity() -> None:
    hook = WebhookNotifier("webhook:am", WebhookConfig(url="http://127.0.0.1:9/", format="alertmanager"))
    plain = WebhookNotifier("webhook:plain", WebhookConfig(url="http://127.0.0.1:9/"))
    receivers = receivers_of(
        {"webhook:am": hook, "webhook:plain": plain, "log": LogNotifier()},
        {"log": Route(min_severity="critical", matchers={"team": "a"})},
    )
    assert receivers == (
        Receiver("webhook:am", storms=False),
        Receiver("webhook:plain"),
        Receiver("log", Severity.CRITICAL, (("team", "a"),)),
    )


def test_a_record_of_the_book_alert_is_a_frozen_copy() -> None:
    book, _ = fired_book("g")
    alert = next(iter(book.alerts.values()))
    record = AlertRecord.of(alert)
    alert.labels["team"] = "changed"
    assert "team" not in record.labels
    with pytest.raises(AttributeError):
        record.severity = Severity.CRITICAL  # type: ignore[misc]


def test_the_lake_without_pyarrow_is_a_config_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lagwatch.lake.settings.lake_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"lake\.enabled: .*pyarrow.*pip install '\.\[spark\]'"):
        load_settings(lake={"enabled": True})
    assert not load_settings(lake={"enabled": False}).lake.enabled


def test_alerts_regrouped_by_a_new_group_by_end_the_old_message_as_regrouped_and_go_on_in_their_own() -> None:
    """`alerts.group_by` changed between two runs: the incident was posted again under the new group, and the old
    message stayed red for good (its alerts were dropped from it quietly)."""
    from lagwatch.notify import render

    book = AlertBook(AlertsConfig(group_wait_s=0, group_interval_s=0))
    book.apply("c", [finding("g", topic="t1"), finding("g", topic="t2")], frozenset(), NOW)
    (first,) = book.due(NOW)
    book.delivered(first)
    finer = AlertsConfig(group_wait_s=0, group_interval_s=0, group_by=["cluster", "group", "topic"])
    again = restart.restore(
        finer,
        saved(book),
        book.receivers,
        now=NOW + 60,
        lost_state=False,
        queued=[],
        unread_queued=[],
        labels_of=lambda a: (a.labels, a.key.removeprefix(a.rule)),
        clusters=["c"],
    ).book
    notes = again.due(NOW + 60)
    (old,) = [n for n in notes if n.group_key == first.group_key]
    assert old.kind is NotificationKind.RESOLVED and render.outcome(old) == "regrouped"
    assert all(a.regrouped and a.state is AlertState.RESOLVED for a in old.alerts) and len(old.alerts) == 2
    assert "REGROUPED" in render.title(old) and "regrouped" in render.thread_text(old)
    new = sorted((n.group_labels["topic"], n.kind) for n in notes if n.group_key != first.group_key)
    assert new == [("t1", NotificationKind.FIRING), ("t2", NotificationKind.FIRING)]
    for n in notes:
        again.delivered(n)
    assert again.due(NOW + 120) == [] and first.group_key not in again.groups
