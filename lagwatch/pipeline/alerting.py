"""What the daemon's alerting did over a report's range: alerts and pages per day, per rule and per team, time
firing, the noisiest groups, and whether an expiry near miss was warned of. Pure (standard library only): the
report's driver reads the lake's alert transitions, pairs them into incidents (`whatif.recorded_incidents`) and
feeds them here; the HTML page draws what this returns.

An alert is one incident (firing to resolution); a page is one that reached critical, as in the backtest's
comparison. Time firing is the sum over alerts of their firing spans within the range (two alerts of one group
firing at once count twice: alert-hours, what an on-call rota pays for).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from lagwatch.pipeline.whatif import Incident

NO_TEAM = "(no team label)"
EXPIRY_RULES = ("expiry", "expired")
SEVERITIES = ("critical", "warning", "info")  # drawn and counted in this order; another severity counts as info
DAY_S = 86400.0


@dataclass(frozen=True)
class FiredAlert:
    """One of the daemon's incidents, with the routing label it was sent under (None: it had none)."""

    incident: Incident
    team: str | None


@dataclass(frozen=True)
class Day:
    day: str  # YYYY-MM-DD, UTC
    fired: Mapping[str, int]  # alerts that fired this day, by the highest severity they reached
    pages: int  # of them, those that reached critical
    firing_s: float  # alert-seconds firing within the day

    @property
    def alerts(self) -> int:
        return sum(self.fired.values())


@dataclass(frozen=True)
class Tally:
    """Alerts of one rule, or of one team."""

    name: str
    alerts: int
    pages: int
    firing_s: float
    median_s: float | None  # the median alert's time firing (still-firing ones up to the range's end)
    longest_s: float
    groups: int


@dataclass(frozen=True)
class NoisyGroup:
    cluster: str
    group: str
    team: str | None
    alerts: int
    pages: int
    firing_s: float
    rules: tuple[str, ...]


@dataclass(frozen=True)
class Alerting:
    days: list[Day]
    rules: list[Tally]
    teams: list[Tally]
    noisiest: list[NoisyGroup]
    alerts: int
    pages: int
    firing_s: float

    @property
    def empty(self) -> bool:
        return self.alerts == 0


def severity_of(incident: Incident) -> str:
    return incident.severity if incident.severity in SEVERITIES else "info"


def firing_span(incident: Incident, ranges: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
    """From firing to resolution, cut at the range's end (a still-firing alert fires to the last poll)."""
    last = ranges.get(incident.cluster, (incident.fired_at, incident.fired_at))[1]
    end = min(incident.resolved_at if incident.resolved_at is not None else last, last)
    return incident.fired_at, max(incident.fired_at, end)


def day_of(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def _per_day(span: tuple[float, float]) -> Iterable[tuple[str, float]]:
    """A span's seconds on each UTC day it covers."""
    start, end = span
    while start < end:
        midnight = (start // DAY_S + 1) * DAY_S
        cut = min(end, midnight)
        yield day_of(start), cut - start
        start = cut


def _tally(name: str, alerts: Sequence[FiredAlert], ranges: Mapping[str, tuple[float, float]]) -> Tally:
    lengths = [b - a for a, b in (firing_span(x.incident, ranges) for x in alerts)]
    return Tally(
        name=name,
        alerts=len(alerts),
        pages=sum(1 for x in alerts if x.incident.pages),
        firing_s=sum(lengths),
        median_s=statistics.median(lengths) if lengths else None,
        longest_s=max(lengths, default=0.0),
        groups=len({(x.incident.cluster, x.incident.group) for x in alerts if x.incident.group is not None}),
    )


def summarize(
    alerts: Sequence[FiredAlert], ranges: Mapping[str, tuple[float, float]], days: Sequence[str], noisiest: int = 10
) -> Alerting:
    """The alerting figures of a range: `days` are the range's days (each gets a row, quiet ones too), `ranges`
    each cluster's first and last poll."""
    fired: dict[str, dict[str, int]] = {d: {} for d in days}
    pages: dict[str, int] = dict.fromkeys(days, 0)
    firing: dict[str, float] = dict.fromkeys(days, 0.0)
    for x in alerts:
        i = x.incident
        day = day_of(i.fired_at)
        counts = fired.setdefault(day, {})
        counts[severity_of(i)] = counts.get(severity_of(i), 0) + 1
        pages[day] = pages.get(day, 0) + (1 if i.pages else 0)
        for d, seconds in _per_day(firing_span(i, ranges)):
            firing[d] = firing.get(d, 0.0) + seconds
    day_rows = [
        Day(d, dict(fired.get(d, {})), pages.get(d, 0), firing.get(d, 0.0)) for d in sorted(set(fired) | set(firing))
    ]

    by_rule: dict[str, list[FiredAlert]] = {}
    by_team: dict[str, list[FiredAlert]] = {}
    by_group: dict[tuple[str, str], list[FiredAlert]] = {}
    for x in alerts:
        by_rule.setdefault(x.incident.rule, []).append(x)
        by_team.setdefault(x.team if x.team is not None else NO_TEAM, []).append(x)
        if x.incident.group is not None:
            by_group.setdefault((x.incident.cluster, x.incident.group), []).append(x)

    def loudest(t: Tally) -> tuple[int, int, float, str]:
        return (-t.pages, -t.alerts, -t.firing_s, t.name)

    groups = []
    for (cluster, group), xs in by_group.items():
        t = _tally(group, xs, ranges)
        teams = sorted({x.team for x in xs if x.team is not None})
        groups.append(
            NoisyGroup(
                cluster, group, ", ".join(teams) or None, t.alerts, t.pages, t.firing_s,
                tuple(sorted({x.incident.rule for x in xs})),
            )
        )  # fmt: skip
    groups.sort(key=lambda g: (-g.alerts, -g.pages, -g.firing_s, g.cluster, g.group))
    return Alerting(
        days=day_rows,
        rules=sorted((_tally(r, xs, ranges) for r, xs in by_rule.items()), key=loudest),
        teams=sorted((_tally(t, xs, ranges) for t, xs in by_team.items()), key=loudest),
        noisiest=groups[:noisiest],
        alerts=len(alerts),
        pages=sum(1 for x in alerts if x.incident.pages),
        firing_s=sum(b - a for a, b in (firing_span(x.incident, ranges) for x in alerts)),
    )


def expiry_warned_at(alerts: Sequence[FiredAlert], cluster: str, group: str, day: str) -> float | None:
    """When the daemon first warned (`expiry` or `expired`) of a group's offsets on a day its offsets came near
    expiring: the earliest such alert firing at some time of that day (fired before it and still firing counts,
    at its own firing time); None: it never did."""
    start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    times = [
        x.incident.fired_at
        for x in alerts
        if x.incident.rule in EXPIRY_RULES
        and x.incident.cluster == cluster
        and x.incident.group == group
        and x.incident.fired_at < start + DAY_S
        and x.incident.end() >= start
    ]
    return min(times, default=None)


@dataclass(frozen=True)
class NotificationDay:
    """Notifications per config and day, by kind (firing, update, repeat, resolved), from a backtest's replay."""

    config: str
    day: str
    kinds: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.kinds.values())


def notifications_per_day(rows: Iterable[tuple[str, float, str]]) -> list[NotificationDay]:
    """(config, created_at, kind) rows -> one NotificationDay per config and day, in order."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for config, at, kind in rows:
        kinds = counts.setdefault((config, day_of(at)), {})
        kinds[kind] = kinds.get(kind, 0) + 1
    return [NotificationDay(c, d, k) for (c, d), k in sorted(counts.items())]
