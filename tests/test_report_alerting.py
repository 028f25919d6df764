"""The report's alerting figures on plain incidents (lagwatch.pipeline.alerting, pure): time firing cut at midnight
and at the range's end, teams, the noisiest groups, and when an expiry near miss was warned of."""

from __future__ import annotations

from lagwatch.pipeline.alerting import NO_TEAM, FiredAlert, expiry_warned_at, notifications_per_day, summarize
from lagwatch.pipeline.whatif import Incident

DAY = 86400.0
T0 = 1_793_923_200.0  # 2026-11-06T00:00:00Z


def alert(rule: str, severity: str, fired: float, resolved: float | None, group: str = "g", team: str | None = None):  # type: ignore[no-untyped-def]
    return FiredAlert(Incident("c", group, None, rule, severity, fired, resolved, f"{rule}|{group}"), team)


def test_time_firing_is_cut_at_midnight_and_at_the_range_end() -> None:
    alerts = [
        alert("lag", "critical", T0 + DAY - 600, T0 + DAY + 1200, team="payments"),  # 10 min, then 20 min next day
        alert("stopped", "warning", T0 + DAY + 3000, None, group="h"),  # still firing: up to the last poll
    ]
    ranges = {"c": (T0, T0 + DAY + 3600)}
    a = summarize(alerts, ranges, ["2026-11-06", "2026-11-07"])
    assert [(d.day, d.alerts, d.pages, d.firing_s) for d in a.days] == [
        ("2026-11-06", 1, 1, 600.0),
        ("2026-11-07", 1, 0, 1200.0 + 600.0),
    ]
    assert a.days[0].fired == {"critical": 1} and a.days[1].fired == {"warning": 1}
    assert (a.alerts, a.pages, a.firing_s) == (2, 1, 2400.0)
    assert [(t.name, t.alerts, t.pages, t.firing_s, t.groups) for t in a.teams] == [
        ("payments", 1, 1, 1800.0, 1),
        (NO_TEAM, 1, 0, 600.0, 1),
    ]


def test_quiet_days_get_a_row_and_the_noisiest_groups_come_first() -> None:
    alerts = [alert("lag", "warning", T0 + 60 * i, T0 + 60 * i + 30) for i in range(3)]
    alerts += [alert("lag", "critical", T0, T0 + 30, group="h"), alert("rewind", "warning", T0, T0 + 30, group="h")]
    alerts.append(alert("expiry", "warning", T0, T0 + 10, group="h"))
    a = summarize(alerts, {"c": (T0, T0 + 2 * DAY)}, ["2026-11-06", "2026-11-07"])
    assert [d.day for d in a.days] == ["2026-11-06", "2026-11-07"] and a.days[1].alerts == 0
    assert [(g.group, g.alerts, g.pages, g.rules) for g in a.noisiest] == [  # as many alerts: pages decide
        ("h", 3, 1, ("expiry", "lag", "rewind")),
        ("g", 3, 0, ("lag",)),
    ]
    assert [g.group for g in summarize(alerts[:3] + alerts[4:], {"c": (T0, T0 + DAY)}, []).noisiest] == ["g", "h"]
    assert [r.name for r in a.rules] == ["lag", "rewind", "expiry"]  # pages first, then alerts, then time firing
    assert a.rules[0].median_s == 30.0 and a.rules[0].longest_s == 30.0


def test_an_expiry_near_miss_is_warned_of_by_an_alert_firing_that_day() -> None:
    alerts = [
        alert("expiry", "warning", T0 - 3600, None, group="idle"),  # fired the day before, still firing
        alert("expired", "critical", T0 + 7200, T0 + 7300, group="idle"),
        alert("lag", "critical", T0 - 7200, None, group="other"),
    ]
    assert expiry_warned_at(alerts, "c", "idle", "2026-11-06") == T0 - 3600
    assert expiry_warned_at(alerts, "c", "idle", "2026-11-08") == T0 - 3600  # still firing then
    assert expiry_warned_at(alerts[1:], "c", "idle", "2026-11-05") is None  # fired after that day
    assert expiry_warned_at(alerts, "c", "other", "2026-11-06") is None  # not an expiry alert


def test_notifications_per_config_and_day() -> None:
    rows = [("recorded", T0 + 10, "firing"), ("recorded", T0 + 20, "resolved"), ("lag2x", T0 + DAY, "firing")]
    days = notifications_per_day(rows)
    assert [(n.config, n.day, dict(n.kinds), n.total) for n in days] == [
        ("lag2x", "2026-11-07", {"firing": 1}, 1),
        ("recorded", "2026-11-06", {"firing": 1, "resolved": 1}, 2),
    ]
