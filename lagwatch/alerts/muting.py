"""Muting: silences (by the configuration or the API) and inhibition (one story per incident), as Alertmanager's.

A muted alert still fires (the API and metrics show it); it is only not notified. Which receivers were told of it,
and so owe its end, is the notification log's concern (lagwatch.alerts.nflog)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from lagwatch.alerts.records import Alert
from lagwatch.alerts.settings import AlertsConfig, InhibitRule
from lagwatch.matchers import compile_pattern
from lagwatch.model import from_row

SILENCE_KEPT_S = 3600.0  # an API silence is let go this long after it ended


@dataclass
class Silence:
    id: str
    matchers: dict[str, str]
    ends_at: float
    starts_at: float | None = None
    comment: str = ""
    created_by: str = "config"

    def active(self, now: float) -> bool:
        return (self.starts_at is None or self.starts_at <= now) and now < self.ends_at


class Inhibitor(NamedTuple):
    """An inhibit rule with firing sources, as `inhibited` asks it of each firing alert."""

    target: tuple[tuple[str, str], ...]
    equal: tuple[str, ...]
    sources: dict[tuple[str, ...], set[str]]  # values of the `equal` labels -> keys of the firing sources
    # Whether its target matches each (rule, severity) of the firing alerts, when it reads nothing else (the
    # default rules): asked so, not by matching each alert. None: matched alert by alert.
    target_kinds: dict[tuple[str, str], bool] | None = None


def silenced(silences: Sequence[Silence], alert: Alert, now: float) -> Silence | None:
    if not silences:  # asked for every firing alert at every poll: no labels built for nothing
        return None
    return next((s for s in silences if s.active(now) and alert.matches(s.matchers.items())), None)


def without_ended(silences: list[Silence], now: float) -> list[Silence]:
    """Ended API silences go (the API lists active and future ones only: nobody could find their ids to delete
    them, and the book and the state database kept them for good). The same list when none has ended."""
    if silences and any(s.created_by != "config" and s.ends_at < now - SILENCE_KEPT_S for s in silences):
        return [s for s in silences if s.created_by == "config" or s.ends_at >= now - SILENCE_KEPT_S]
    return silences


_KIND_LABELS = frozenset({"rule", "severity"})


def _reads_kind_only(matchers: tuple[tuple[str, str], ...]) -> bool:
    return all(label in _KIND_LABELS for label, _ in matchers)


def inhibitors(rules: Sequence[InhibitRule], firing: list[Alert]) -> list[Inhibitor]:
    """Per inhibit rule with a firing source, those sources by their values of its `equal` labels. Built once
    per `due`: looking a target up is then one dict access, not a pass over every firing alert (at 1,000
    firing groups the pairwise check took 10-15 s a poll). Matchers that read only `rule` and `severity` (the
    default rules) are matched once per (rule, severity) among the firing alerts, not once per alert (200,000
    firing alerts at 1M group-partitions)."""
    index: list[Inhibitor] = []
    kinds: dict[tuple[str, str], list[Alert]] | None = None
    for rule in rules:
        by_equal: dict[tuple[str, ...], set[str]] = {}
        matchers = tuple(rule.source.items())
        target = tuple(rule.target.items())
        if kinds is None and (_reads_kind_only(matchers) or _reads_kind_only(target)):
            kinds = {}
            for a in firing:
                kind = (a.rule, a.severity)
                alerts = kinds.get(kind)
                if alerts is None:
                    kinds[kind] = [a]
                else:
                    alerts.append(a)
        if kinds is not None and _reads_kind_only(matchers):
            sources = [a for alerts in kinds.values() if alerts[0].matches(matchers) for a in alerts]
        else:
            sources = [a for a in firing if a.matches(matchers)]
        for source in sources:
            labels = source.labels
            values = tuple([labels.get(name, "") for name in rule.equal])
            by_equal.setdefault(values, set()).add(source.key)
        if by_equal:  # a rule without a firing source inhibits nothing: not asked of every alert
            target_kinds = (
                {kind: alerts[0].matches(target) for kind, alerts in kinds.items()}
                if kinds is not None and _reads_kind_only(target)
                else None
            )
            index.append(Inhibitor(target, tuple(rule.equal), by_equal, target_kinds))
    return index


def inhibited(alert: Alert, index: list[Inhibitor]) -> bool:
    """Whether another firing alert inhibits this one (Alertmanager's inhibition: one story per incident)."""
    for target, equal, by_equal, target_kinds in index:
        # The target first: most alerts are not one (a memoised match), and then no tuple of labels is built.
        is_target = None if target_kinds is None else target_kinds.get((alert.rule, alert.severity))
        if not (alert.matches(target) if is_target is None else is_target):
            continue
        labels = alert.labels
        sources = by_equal.get(tuple([labels.get(name, "") for name in equal]))
        if sources and (len(sources) > 1 or alert.key not in sources):
            return True
    return False


def config_silences(config: AlertsConfig) -> list[Silence]:
    return [
        Silence(
            id=f"config-{i}",
            matchers=dict(s.matchers),
            ends_at=s.ends_at.timestamp(),
            starts_at=s.starts_at.timestamp() if s.starts_at else None,
            comment=s.comment,
        )
        for i, s in enumerate(config.silences)
    ]


def load_silence(raw: Any) -> Silence:
    """A saved silence whose every matcher still compiles (one that did not failed every poll after it)."""
    silence = from_row(Silence, raw)
    for label, pattern in silence.matchers.items():
        try:
            compile_pattern(pattern)
        except ValueError as e:
            raise ValueError(f"matcher {label}={pattern!r}: {e}") from None
    return silence
