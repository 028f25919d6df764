"""Rules on figures of one poll: lag over thresholds (with hysteresis), committed offsets below the log start."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

from lagwatch.lag import LagState
from lagwatch.model import Finding, GroupKind
from lagwatch.rules.context import GroupContext
from lagwatch.rules.settings import LagRule, Threshold
from lagwatch.rules.text import duration, partitions

_RANK = {"warning": 1, "critical": 2}

_LAG_FIGURES = ("lag", "max_lag", "lag_seconds", "eta_s", "falling_behind")
_LAG_KEYS = (*_LAG_FIGURES, "worst_partitions")


# A worst partition packed: partition, lag, lag in seconds, and flags (1: no lag, 2: no lag in seconds).
_WORST_ROW = "qqdB"
_WORST = [struct.Struct("<" + _WORST_ROW * n) for n in range(6)]


def _pack_worst(flat: tuple[int | float | None, ...]) -> bytes | tuple[int | float | None, ...]:
    """(partition, lag, lag_seconds, ...) as machine values, or as given where one is not a plain int or float
    (or there are more than five rows): the figures must read back as they were made."""
    n = len(flat) // 3
    if n >= len(_WORST):
        return flat
    values: list[int | float] = []
    for i in range(0, len(flat), 3):
        partition, lag, seconds = flat[i], flat[i + 1], flat[i + 2]
        if (
            type(partition) is not int
            or (lag is not None and type(lag) is not int)
            or (seconds is not None and type(seconds) is not float)
        ):
            return flat
        values += (partition, 0 if lag is None else lag, 0.0 if seconds is None else seconds)
        values.append((lag is None) | (seconds is None) << 1)
    try:
        return _WORST[n].pack(*values)
    except struct.error:  # an offset beyond 64 bits
        return flat


class LagDetails(Mapping[str, Any]):
    """A lag finding's details, as the alert book keeps them until the next poll: {"lag", "max_lag",
    "lag_seconds", "eta_s", "falling_behind", "worst_partitions": [{"partition", "lag", "lag_seconds"}, ...]}.
    The five worst partitions are packed in one bytes (machine values), and are made dicts only when read: where
    the details leave the process (the state's JSON, the API, notifications, the lake), which all read them as a
    mapping. As dicts they were 1.6 KB of the alert's 1.9 KB: 10,000 lag alerts in a storm at 100k
    group-partitions (bench/daemon_step_bench.py); packed, 160 bytes. Read-only, as every details mapping is."""

    __slots__ = ("eta_s", "falling_behind", "lag", "lag_seconds", "max_lag", "worst")

    def __init__(
        self,
        lag: int,
        max_lag: int,
        lag_seconds: float | None,
        eta_s: float | None,
        falling_behind: bool,
        worst: tuple[int | float | None, ...],
    ) -> None:
        """`worst`: (partition, lag, lag_seconds) of each of the worst partitions, one after the other."""
        self.lag, self.max_lag, self.lag_seconds, self.eta_s = lag, max_lag, lag_seconds, eta_s
        self.falling_behind, self.worst = falling_behind, _pack_worst(worst)

    def _worst_rows(self) -> list[dict[str, Any]]:
        w = self.worst
        if isinstance(w, tuple):
            return [{"partition": w[i], "lag": w[i + 1], "lag_seconds": w[i + 2]} for i in range(0, len(w), 3)]
        values = _WORST[len(w) // _WORST[1].size].unpack(w)
        return [
            {
                "partition": values[i],
                "lag": None if values[i + 3] & 1 else values[i + 1],
                "lag_seconds": None if values[i + 3] & 2 else values[i + 2],
            }
            for i in range(0, len(values), 4)
        ]

    def __getitem__(self, key: str) -> Any:
        if key == "worst_partitions":
            return self._worst_rows()
        if key in _LAG_FIGURES:
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(_LAG_KEYS)

    def __len__(self) -> int:
        return len(_LAG_KEYS)

    def __repr__(self) -> str:
        return repr(dict(self))


def _over(threshold: Threshold, offsets: int, seconds: float | None, ratio: float) -> bool:
    if threshold.offsets is not None and offsets >= threshold.offsets * ratio:
        return True
    return threshold.seconds is not None and seconds is not None and seconds >= threshold.seconds * ratio


def lag_severity(rule: LagRule, offsets: int, seconds: float | None, active: str | None) -> str | None:
    """Severity now, given the severity the alert already fires with (None if it does not; "pending" while its
    `for` runs). Crossing a level needs the full threshold; staying at a level an alert fired at needs only
    `resolve_ratio` of it, so lag hovering at a threshold does not flap. A pending alert is held to the full
    threshold: its condition must hold for its whole `for`."""
    held = _RANK.get(active or "", 0)
    for level in ("critical", "warning"):
        ratio = rule.resolve_ratio if held >= _RANK[level] else 1.0
        if _over(getattr(rule, level), offsets, seconds, ratio):
            return level
    return None


def _kept_in_doubt(
    rule: LagRule, active: str | None, severity: str | None, offsets: int, seconds: float | None, estimated: bool
) -> str | None:
    """The level a firing alert keeps when it would be lowered or resolved on a lag in seconds lagwatch does not
    know: unknown (the log's history wiped by a truncation, or lost) or only a lower bound (older than the history,
    or produced during a blind spell, dated at its end). Records are still behind, and a consumer 40 minutes behind
    was resolved after an outage, then paged again from warning. It keeps the highest level at or below its own
    that a seconds threshold could justify (a critical on records alone, with records now below it, is disproved:
    warning, if that one is on seconds), or its own when only a level above it is on seconds; None when nothing is in
    doubt, or no threshold is on seconds, or no such level would be above `severity`."""
    level = _RANK.get(active or "", 0)
    if not level or _RANK.get(severity or "", 0) >= level or offsets <= 0 or not (seconds is None or estimated):
        return None
    for name in ("critical", "warning"):
        if _RANK[name] <= level and getattr(rule, name).seconds is not None:
            return name if _RANK[name] > _RANK.get(severity or "", 0) else None
    # Only a level above it is on seconds (warning on records, critical on seconds): what is not known may yet
    # prove that one, so the alert is not resolved meanwhile (it was, and paged again as critical).
    if any(getattr(rule, name).seconds is not None for name in ("critical", "warning")):
        return active
    return None


def lag_over_threshold(ctx: GroupContext) -> Iterator[Finding]:
    m = ctx.measure
    group = ctx.group.group_id
    progress: str | None = None  # the group's catch-up wording: worked out once, for its first topic over
    lags, tps = m.lag.lags, m.lag.tps  # lags: 0 where a row has none (m.lag.lag(i) says None)
    end = 0  # each topic's rows are adjacent, in the order of lag.topics: this one's are rows[start:end]
    for topic, max_seconds, estimated in zip(m.lag.topics, m.topic_lag_seconds, m.topic_estimated, strict=True):
        start = end
        end += topic.partitions
        rules, _ = ctx.rules(topic.topic)
        if not rules.lag.enabled:
            continue
        active = ctx.active_severity("lag", topic.topic)
        severity = lag_severity(rules.lag, topic.sum_lag, max_seconds, active)
        kept = _kept_in_doubt(rules.lag, active, severity, topic.sum_lag, max_seconds, estimated)
        if kept is not None:
            if kept == active:
                ctx.hold("lag", topic.topic)
                continue
            severity = kept
        if severity is None:
            continue
        if topic.unknown and _RANK.get(severity, 0) < _RANK.get(active or "", 0):
            continue  # a partition's log end unread: what the rest says may raise the alert, never lower it
        # The five rows with the most lag, in row order among equals (a stable sort of the row numbers).
        worst = sorted(range(start, end), key=lags.__getitem__, reverse=True)[:5]  # reverse keeps it stable
        eta = m.eta_s
        falling_behind = m.falling_behind
        if progress is None:
            if eta is not None:
                progress = f"catching up in about {duration(eta)}"
            elif m.consumption_rate == 0 and falling_behind:
                progress = "not consuming"
            elif falling_behind:
                progress = "falling behind"
            else:
                progress = "no catch-up estimate yet"
        lag_time = "" if max_seconds is None else f", {duration(max_seconds)} behind"
        if estimated and max_seconds is not None:
            lag_time += " (estimated)"
        yield ctx.finding(
            "lag",
            severity,
            f"{group} lags {topic.sum_lag} records on {topic.topic}{lag_time}; {progress}",
            topic=topic.topic,
            details=LagDetails(
                topic.sum_lag,
                topic.max_lag,
                max_seconds,
                eta,
                falling_behind,
                tuple(x for i in worst for x in (tps[i].partition, m.lag.lag(i), m.seconds(i))),
            ),
            for_s=rules.lag.for_s,
            runbook_url=rules.lag.runbook_url,
        )


def below_log_start(ctx: GroupContext) -> Iterator[Finding]:
    if not ctx.measure.lag.below_log_start or ctx.group.kind is GroupKind.SHARE:
        return  # counted by group_lag: most groups have no such row; a queue's position is no commit (rules.queue)
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for p in ctx.measure.lag.partitions:
        if p.state is LagState.BELOW_LOG_START and p.committed is not None and p.log_start is not None:
            by_topic.setdefault(p.topic, []).append((p.partition, p.committed, p.log_start))
    for topic, rows in sorted(by_topic.items()):
        rules, _ = ctx.rules(topic)
        if not rules.below_log_start.enabled:
            continue
        lost = sum(start - committed for _, committed, start in rows)
        yield ctx.finding(
            "below_log_start",
            rules.below_log_start.severity,
            f"{ctx.group.group_id} would resume on {partitions([(topic, p) for p, _, _ in rows])} from offsets "
            f"already deleted: {lost} records were never consumed and are gone",
            topic=topic,
            details={
                "partitions": [{"partition": p, "committed": c, "log_start": s} for p, c, s in rows],
                "lost": lost,
            },
            for_s=rules.below_log_start.for_s,
            runbook_url=rules.below_log_start.runbook_url,
        )
