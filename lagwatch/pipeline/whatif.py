"""What a candidate configuration would have changed: its overlay on the recorded configuration, and its alerts set
beside the ones the daemon really raised. Pure (standard library only, no Spark, pandas or files), so that it is
tested on plain rows; the backtest's driver feeds it and prints and writes what it returns.

An *incident* is one alert from firing to resolution: the replay's alert rows, or the lake's `alerts` transitions
(a firing row and a resolved row, paired by key and firing time). A *page* is an incident that reached critical:
the lake records alert transitions, not notifications, so that is what can be counted alike on both sides (the
replay's own notifications are in its Parquet output, `kind = notification`).

Two incidents are the same one when they have the same cluster, group, topic and rule and their firing spans
(fired_at to resolved_at, or to the end of the range) overlap: severity is not part of it, as a lag alert whose
threshold was raised may still fire but no longer reach critical. Where one side's incident overlaps two or more
of the other's, they were *merged* (the replay fired once where the daemon fired twice: a longer hysteresis, a
lower resolve ratio) or *split* (the reverse): neither lost nor gained.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

CRITICAL = "critical"
_RANK = {"info": 0, "warning": 1, "critical": 2}
SAME_TIME_S = 1e-3  # fire times closer than this are the same (both sides hold the poll's time, exactly)


# -- the overlay -----------------------------------------------------------------------------------------------------


def overlay(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` deep-merged over `base`: mappings merge key by key; anything else (a number, null, a list such as
    `overrides` or `silences`) replaces the base's value whole."""
    merged = dict(base)
    for key, value in extra.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = overlay(below, value)
        else:
            merged[key] = value
    return merged


def leaves(extra: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths an overlay sets: down through its mappings; a list or an empty mapping is one leaf."""
    out: list[tuple[str, ...]] = []
    for key, value in extra.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            out += leaves(value, path)
        else:
            out.append(path)
    return out


_MISSING = object()


def value_at(config: Mapping[str, Any] | None, path: Sequence[str]) -> Any:
    """The value at `path` in a configuration, or `_MISSING`."""
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


class LeafChange(NamedTuple):
    """One leaf a candidate sets: its path (`rules.lag.warning.offsets`), the values recorded under it (one per
    distinct value, over clusters and recorded times), and the candidate's."""

    path: str
    recorded: tuple[str, ...]
    candidate: str

    @property
    def changes(self) -> bool:
        return self.recorded != (self.candidate,)

    def text(self) -> str:
        before = self.recorded[0] if len(self.recorded) == 1 else f"({' / '.join(self.recorded)})"
        return f"{self.path} {before} -> {self.candidate}" if self.changes else f"{self.path} {self.candidate}"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(unset)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # YAML's 5 and the recorded 5.0 are one value
    if isinstance(value, list | Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def leaf_changes(
    section: str, extra: Mapping[str, Any], recorded: Iterable[Mapping[str, Any] | None]
) -> list[LeafChange]:
    """Each leaf of a candidate's `section` (rules or alerts) beside the values recorded there."""
    bases = list(recorded)
    out = []
    for path in leaves(extra):
        before = sorted({_show(value_at(b, path)) for b in bases})
        out.append(LeafChange(".".join((section, *path)), tuple(before), _show(value_at(extra, path))))
    return out


def overlay_line(name: str, changes: Sequence[LeafChange]) -> str:
    """`candidate NAME: overlay on the recorded configuration: ...`, the leaves that change it first."""
    changed = [c.text() for c in changes if c.changes]
    same = [c.path for c in changes if not c.changes]
    text = f"candidate {name}: overlay on the recorded configuration: "
    text += "; ".join(changed) if changed else "changes nothing recorded"
    if same:
        text += f" (as recorded already: {', '.join(same)})"
    return text


# -- incidents ------------------------------------------------------------------------------------------------------


class Incident(NamedTuple):
    """One alert from firing to resolution."""

    cluster: str
    group: str | None
    topic: str | None
    rule: str
    severity: str  # the highest it reached
    fired_at: float
    resolved_at: float | None  # None: still firing at the end of the range
    key: str
    # False: the daemon's, still firing at the range's end: its severity is the one at firing, as the lake records
    # no escalation before the resolution (see `settle_open`)
    severity_final: bool = True

    @property
    def pages(self) -> bool:
        return self.severity == CRITICAL

    def end(self) -> float:
        return math.inf if self.resolved_at is None else self.resolved_at

    def identity(self) -> tuple[str, str | None, str | None, str]:
        return (self.cluster, self.group, self.topic, self.rule)


class RecordedTransition(NamedTuple):
    """One row of the lake's `alerts` dataset: a transition the daemon made."""

    cluster: str
    at: float
    transition: str  # firing | resolved
    key: str
    rule: str
    severity: str  # firing: at firing; resolved: the highest it reached
    group: str | None
    topic: str | None
    fired_at: float
    resolved_at: float | None


class RecordedIncidents(NamedTuple):
    compared: list[Incident]
    before_range: list[Incident]  # fired before the cluster's first replayed poll: the replay cannot see them


def recorded_incidents(
    transitions: Iterable[RecordedTransition], ranges: Mapping[str, tuple[float, float]]
) -> RecordedIncidents:
    """The daemon's incidents from its transitions, within each cluster's replayed range (first, last poll): a
    firing row and its resolved row (same key and firing time) are one incident; one resolved after the range is
    still firing at its end, as in the replay. A resolved row alone (the alert fired before a restart, or before
    the range) carries its firing time too."""
    by_alert: dict[tuple[str, str, float], list[RecordedTransition]] = {}
    for t in sorted(transitions, key=lambda t: (t.at, t.transition != "firing")):
        by_alert.setdefault((t.cluster, t.key, t.fired_at), []).append(t)
    compared: list[Incident] = []
    before: list[Incident] = []
    for (cluster, key, fired_at), rows in by_alert.items():
        if cluster not in ranges:
            continue
        first, last = ranges[cluster]
        if fired_at > last:
            continue
        resolved = next((r for r in rows if r.transition == "resolved"), None)
        resolved_at = None
        if resolved is not None and resolved.at <= last:
            resolved_at = resolved.resolved_at if resolved.resolved_at is not None else resolved.at
        head = rows[0]
        seen = [r for r in rows if r.at <= last]
        severity = max((r.severity for r in seen or rows), key=lambda s: _RANK.get(s, -1))
        incident = Incident(
            cluster, head.group, head.topic, head.rule, severity, fired_at, resolved_at, key, resolved_at is not None
        )
        (before if fired_at < first else compared).append(incident)
    key_of = _order
    return RecordedIncidents(sorted(compared, key=key_of), sorted(before, key=key_of))


def settle_open(recorded: Sequence[Incident], reference: Iterable[Incident]) -> tuple[list[Incident], int]:
    """The daemon's incidents still firing at the range's end, with the highest severity they reached in it taken
    from `reference`, the replay of the recorded configuration (which raises what the daemon raised): the lake
    records an alert's firing and its resolution, not its escalation, so one cut by the range's end would count
    as a warning the replay "escalated" to a page. Returns the incidents and how many took a severity so."""
    by_identity: dict[tuple[str, str | None, str | None, str], list[Incident]] = {}
    for r in reference:
        by_identity.setdefault(r.identity(), []).append(r)
    out, settled = [], 0
    for d in recorded:
        twin = None
        if not d.severity_final:
            twin = next(
                (r for r in by_identity.get(d.identity(), []) if abs(r.fired_at - d.fired_at) <= SAME_TIME_S), None
            )
        if twin is None:
            out.append(d)
            continue
        out.append(d._replace(severity=twin.severity, severity_final=True))
        settled += 1
    return out, settled


def _order(i: Incident) -> tuple[Any, ...]:
    return (i.cluster, i.group or "", i.topic or "", i.rule, i.fired_at, i.key)


# -- matching and comparing ---------------------------------------------------------------------------------------


class Outcome(StrEnum):
    """What became of an incident of one side on the other."""

    SAME = "same"  # both fired it at the same time
    EARLIER = "earlier"  # the replay fired it earlier
    LATER = "later"
    LOST = "lost"  # recorded only
    GAINED = "gained"  # replayed only
    MERGED = "merged"  # recorded, and carried by a replayed incident that already covers an earlier recorded one
    SPLIT = "split"  # replayed, and a further piece of a recorded incident already matched to another replayed one


class Match(NamedTuple):
    """One incident and its counterpart: both (the same incident), or only one side (lost or gained). `joined`:
    a recorded incident merged into a replayed one that covers another recorded one too (MERGED), or a replayed
    incident that is a further piece of a recorded one (SPLIT); such a pair is not a second incident on the side
    it repeats."""

    recorded: Incident | None
    replayed: Incident | None
    joined: Outcome | None = None  # MERGED | SPLIT

    @property
    def shift_s(self) -> float | None:
        """How much later (positive) or earlier the replay fired it (a merged or split piece: no shift)."""
        if self.recorded is None or self.replayed is None or self.joined is not None:
            return None
        return self.replayed.fired_at - self.recorded.fired_at

    @property
    def outcome(self) -> Outcome:
        if self.joined is not None:
            return self.joined
        if self.replayed is None:
            return Outcome.LOST
        if self.recorded is None:
            return Outcome.GAINED
        shift = self.shift_s or 0.0
        if shift > SAME_TIME_S:
            return Outcome.LATER
        if shift < -SAME_TIME_S:
            return Outcome.EARLIER
        return Outcome.SAME

    @property
    def new_recorded(self) -> bool:
        """A recorded incident counted here for the first time (not a split piece's repeat of it)."""
        return self.recorded is not None and self.joined is not Outcome.SPLIT

    @property
    def new_replayed(self) -> bool:
        return self.replayed is not None and self.joined is not Outcome.MERGED


def _overlap(a: Incident, b: Incident) -> bool:
    return a.fired_at <= b.end() and b.fired_at <= a.end()


def match(recorded: Iterable[Incident], replayed: Iterable[Incident]) -> list[Match]:
    """Pairs each recorded incident with the first replayed one, in firing order, of the same cluster, group, topic
    and rule whose firing span overlaps its own. What is left: a recorded incident overlapping a replayed one
    already paired was merged into it; a replayed one overlapping a recorded one already paired is a piece of it
    (split); the others are lost (recorded only) or gained (replayed only)."""
    replayed_by: dict[tuple[str, str | None, str | None, str], list[Incident]] = {}
    for r in sorted(replayed, key=_order):
        replayed_by.setdefault(r.identity(), []).append(r)
    every_replayed = {k: list(v) for k, v in replayed_by.items()}
    out: list[Match] = []
    pending: list[Incident] = []
    for d in sorted(recorded, key=_order):
        candidates = replayed_by.get(d.identity(), [])
        found = next((r for r in candidates if _overlap(r, d)), None)
        if found is None:
            pending.append(d)
            continue
        candidates.remove(found)
        out.append(Match(d, found))
    paired: dict[tuple[str, str | None, str | None, str], list[Incident]] = {}
    for m in out:
        if m.recorded is not None:
            paired.setdefault(m.recorded.identity(), []).append(m.recorded)
    for d in pending:
        into = next((r for r in every_replayed.get(d.identity(), []) if _overlap(r, d)), None)
        out.append(Match(d, None) if into is None else Match(d, into, Outcome.MERGED))
    for rest in replayed_by.values():
        for r in rest:
            of = next((d for d in paired.get(r.identity(), []) if _overlap(r, d)), None)
            out.append(Match(None, r) if of is None else Match(of, r, Outcome.SPLIT))
    return out


class RuleComparison(NamedTuple):
    """One rule and severity (the highest an incident reached): the daemon's incidents and the replay's. A pair
    whose severities differ counts in the recorded one's row (`other_severity`) and in the replayed one's."""

    rule: str
    severity: str
    recorded: int
    replayed: int
    gained: int  # replayed, with no recorded counterpart
    lost: int  # recorded, with no replayed counterpart
    other_severity: int  # recorded, whose counterpart reached another severity
    pages_gained: int  # replayed at critical, whose counterpart is missing or did not reach critical
    pages_lost: int  # recorded at critical, whose counterpart is missing or did not reach critical
    earlier: int  # recorded, whose counterpart fired earlier
    later: int
    earlier_median_s: float | None
    earlier_worst_s: float | None  # the most seconds earlier
    later_median_s: float | None
    later_worst_s: float | None  # the most seconds later
    merged: int = 0  # recorded, carried by a replayed incident that covers another recorded one too
    split: int = 0  # replayed, a further piece of one recorded incident

    def differs(self) -> bool:
        return bool(self.gained or self.lost or self.other_severity or self.pages_gained or self.pages_lost) or bool(
            self.earlier or self.later or self.merged or self.split
        )


def compare(matches: Sequence[Match]) -> list[RuleComparison]:
    """Per rule and severity, the incidents recorded and replayed, gained and lost, merged and split, pages gained
    and lost, and fire times earlier or later (median and worst), in rule and severity order. A merged recorded
    incident counts in `merged` (its row), a split piece in `split` (the replayed piece's row); neither is lost,
    gained, nor counted twice on the side it repeats."""
    keys = sorted(
        {(i.rule, i.severity) for m in matches for i in (m.recorded, m.replayed) if i is not None},
        key=lambda k: (k[0], -_RANK.get(k[1], -1)),
    )
    rows = []
    for rule, severity in keys:

        def here(i: Incident | None, rule: str = rule, severity: str = severity) -> bool:
            return i is not None and i.rule == rule and i.severity == severity

        earlier = [-(m.shift_s or 0.0) for m in matches if here(m.recorded) and m.outcome == "earlier"]
        later = [m.shift_s or 0.0 for m in matches if here(m.recorded) and m.outcome == "later"]
        paging = severity == CRITICAL
        rows.append(
            RuleComparison(
                rule=rule,
                severity=severity,
                recorded=sum(1 for m in matches if m.new_recorded and here(m.recorded)),
                replayed=sum(1 for m in matches if m.new_replayed and here(m.replayed)),
                gained=sum(1 for m in matches if here(m.replayed) and m.recorded is None),
                lost=sum(1 for m in matches if here(m.recorded) and m.replayed is None),
                other_severity=sum(
                    1
                    for m in matches
                    if m.joined is None
                    and here(m.recorded)
                    and m.replayed is not None
                    and m.replayed.severity != severity
                ),
                pages_gained=sum(
                    1
                    for m in matches
                    if paging and m.new_replayed and here(m.replayed) and not (m.recorded and m.recorded.pages)
                ),
                pages_lost=sum(
                    1
                    for m in matches
                    if paging and m.new_recorded and here(m.recorded) and not (m.replayed and m.replayed.pages)
                ),
                earlier=len(earlier),
                later=len(later),
                earlier_median_s=statistics.median(earlier) if earlier else None,
                earlier_worst_s=max(earlier) if earlier else None,
                later_median_s=statistics.median(later) if later else None,
                later_worst_s=max(later) if later else None,
                merged=sum(1 for m in matches if m.joined is Outcome.MERGED and here(m.recorded)),
                split=sum(1 for m in matches if m.joined is Outcome.SPLIT and here(m.replayed)),
            )
        )
    return rows


class CandidateTotals(NamedTuple):
    """A candidate's incidents and pages over the whole range, beside the daemon's: what ranks candidates."""

    config: str
    alerts_recorded: int
    alerts_replayed: int
    alerts_gained: int
    alerts_lost: int
    pages_recorded: int
    pages_replayed: int
    pages_gained: int
    pages_lost: int
    earlier: int
    later: int
    median_shift_s: float | None  # over the incidents both raised, replayed minus recorded fire time
    merged: int = 0  # recorded incidents carried by a replayed one that covers another recorded one too
    split: int = 0  # replayed incidents that are a further piece of one recorded incident


def totals(config: str, matches: Sequence[Match]) -> CandidateTotals:
    shifts = [s for m in matches if (s := m.shift_s) is not None]
    return CandidateTotals(
        config=config,
        alerts_recorded=sum(1 for m in matches if m.new_recorded),
        alerts_replayed=sum(1 for m in matches if m.new_replayed),
        alerts_gained=sum(1 for m in matches if m.outcome == Outcome.GAINED),
        alerts_lost=sum(1 for m in matches if m.outcome == Outcome.LOST),
        pages_recorded=sum(1 for m in matches if m.new_recorded and m.recorded is not None and m.recorded.pages),
        pages_replayed=sum(1 for m in matches if m.new_replayed and m.replayed is not None and m.replayed.pages),
        pages_gained=sum(
            1
            for m in matches
            if m.new_replayed and m.replayed and m.replayed.pages and not (m.recorded and m.recorded.pages)
        ),
        pages_lost=sum(
            1
            for m in matches
            if m.new_recorded and m.recorded and m.recorded.pages and not (m.replayed and m.replayed.pages)
        ),
        earlier=sum(1 for m in matches if m.outcome == Outcome.EARLIER),
        later=sum(1 for m in matches if m.outcome == Outcome.LATER),
        median_shift_s=statistics.median(shifts) if shifts else None,
        merged=sum(1 for m in matches if m.joined is Outcome.MERGED),
        split=sum(1 for m in matches if m.joined is Outcome.SPLIT),
    )


def ranked(all_totals: Iterable[CandidateTotals]) -> list[CandidateTotals]:
    """Fewest pages first, then fewest pages lost (a quiet candidate that misses what the daemon paged is no
    better), then fewest alerts."""
    return sorted(all_totals, key=lambda t: (t.pages_replayed, t.pages_lost, t.alerts_replayed, t.config))


# -- the replay of the recorded configuration, beside the daemon ------------------------------------------------


class Difference(NamedTuple):
    """Where the replay of the recorded configuration differs from what the daemon raised, and why when known."""

    match: Match
    what: str  # lost | gained | merged | split | earlier | later | severity | resolved
    reason: str | None


def differences(
    matches: Sequence[Match],
    ranges: Mapping[str, tuple[float, float]],
    warmup_s: Mapping[str, float],
    restarts: Mapping[str, Sequence[float]],
) -> list[Difference]:
    """Every incident the replay did not reproduce exactly (fire and resolve time, severity). Known reasons: the
    daemon had history from before the range and the replay starts empty, so in its first `warmup_s` (the rules'
    longest window) it may fire later or not at all; and a daemon restart (a new configuration recorded) where
    the daemon took up its saved state and the replay went on with its own."""
    out = []
    for m in matches:
        a, b = m.recorded, m.replayed
        if m.joined is not None:
            what = m.joined.value
        elif a is not None and b is not None:
            if m.outcome in (Outcome.EARLIER, Outcome.LATER):
                what = m.outcome.value
            elif a.severity != b.severity:
                what = "severity"
            elif (a.resolved_at is None) != (b.resolved_at is None) or (
                a.resolved_at is not None
                and b.resolved_at is not None
                and abs(a.resolved_at - b.resolved_at) > SAME_TIME_S
            ):
                what = "resolved"
            else:
                continue
        else:
            what = m.outcome.value
        one = (b if m.joined is Outcome.SPLIT else a) or b
        assert one is not None
        out.append(Difference(m, what, _reason(one, ranges, warmup_s, restarts)))
    return out


def _reason(
    i: Incident,
    ranges: Mapping[str, tuple[float, float]],
    warmup_s: Mapping[str, float],
    restarts: Mapping[str, Sequence[float]],
) -> str | None:
    warmup = warmup_s.get(i.cluster, 0.0)
    first = ranges.get(i.cluster, (-math.inf, math.inf))[0]
    if i.fired_at - first <= warmup:
        return f"within the range's first {warmup:g} s: the daemon had history from before it, the replay starts empty"
    for t in restarts.get(i.cluster, ()):
        if t <= i.end() and i.fired_at - t <= warmup:
            return "after a daemon restart: the daemon took up its saved history and alerts, the replay its own"
    return None


# -- text -----------------------------------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table_lines(rows: Sequence[RuleComparison]) -> list[str]:
    """The comparison as an aligned text table, one line per rule and severity."""
    head = ("rule", "severity", "recorded", "replayed", "gained", "lost", "merged", "split", "other sev", "pages +",
            "pages -", "earlier", "median s", "worst s", "later", "median s", "worst s")  # fmt: skip
    body = [
        (r.rule, r.severity, str(r.recorded), str(r.replayed), str(r.gained), str(r.lost), str(r.merged),
         str(r.split), str(r.other_severity), str(r.pages_gained), str(r.pages_lost), str(r.earlier),
         _s(r.earlier_median_s), _s(r.earlier_worst_s), str(r.later), _s(r.later_median_s), _s(r.later_worst_s))
        for r in rows
    ]  # fmt: skip
    if not body:
        return ["  (no alerts on either side)"]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  " + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(head), *(line(b) for b in body)]


def ranking_lines(all_totals: Sequence[CandidateTotals]) -> list[str]:
    head = ("rank", "config", "pages", "pages +", "pages -", "alerts", "alerts +", "alerts -", "merged", "split",
            "earlier", "later", "median shift s")  # fmt: skip
    body = [
        (str(n), t.config, f"{t.pages_replayed} ({t.pages_recorded})", str(t.pages_gained), str(t.pages_lost),
         f"{t.alerts_replayed} ({t.alerts_recorded})", str(t.alerts_gained), str(t.alerts_lost), str(t.merged),
         str(t.split), str(t.earlier), str(t.later), _s(t.median_shift_s))
        for n, t in enumerate(ranked(all_totals), 1)
    ]  # fmt: skip
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return [
        "  "
        + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        for cells in (head, *body)
    ]


def incident_text(i: Incident) -> str:
    where = "/".join(x for x in (i.cluster, i.group, i.topic) if x)
    return f"{i.rule} {i.severity} {where}"


def difference_lines(diffs: Sequence[Difference], iso: Any, limit: int = 20) -> list[str]:
    """One line per difference (the first `limit`); `iso` formats a time."""
    lines = []
    for d in diffs[:limit]:
        a, b = d.match.recorded, d.match.replayed
        if d.what == "lost":
            assert a is not None
            text = f"the daemon raised {incident_text(a)} at {iso(a.fired_at)}; the replay did not"
        elif d.what == "merged":
            assert a is not None and b is not None
            text = (
                f"the daemon raised {incident_text(a)} again at {iso(a.fired_at)}; the replay kept firing the one it "
                f"raised at {iso(b.fired_at)}"
            )
        elif d.what == "split":
            assert a is not None and b is not None
            text = (
                f"the replay raised {incident_text(b)} again at {iso(b.fired_at)}; the daemon kept firing the one it "
                f"raised at {iso(a.fired_at)}"
            )
        elif d.what == "gained":
            assert b is not None
            text = f"the replay raised {incident_text(b)} at {iso(b.fired_at)}; the daemon did not"
        else:
            assert a is not None and b is not None
            if d.what in ("earlier", "later"):
                text = f"{incident_text(a)}: fired {abs(b.fired_at - a.fired_at):.1f} s {d.what} ({iso(b.fired_at)})"
            elif d.what == "severity":
                text = f"{incident_text(a)} at {iso(a.fired_at)}: reached {b.severity} in the replay"
            else:
                when = "still firing" if b.resolved_at is None else iso(b.resolved_at)
                was = "still firing" if a.resolved_at is None else iso(a.resolved_at)
                text = f"{incident_text(a)} at {iso(a.fired_at)}: resolved {when} in the replay, {was} by the daemon"
        lines.append(f"  {text} ({d.reason or 'why: not known'})")
    if len(diffs) > limit:
        lines.append(f"  ... and {len(diffs) - limit} more (see the _incidents output)")
    return lines
