"""The alert transitions of one cluster, as seen after each pipeline step: firing and resolved, with the peak lag.

Pure, and shared by the daemon (which records them in the lake) and the backtest (which replays the lake), so both
describe the same alerts in the same terms. It compares the book with what it saw at the previous step: an alert
that was firing and is gone from the book was resolved by this step (the book prunes resolved alerts once told).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lagwatch.alerts.book import AlertBook
from lagwatch.alerts.records import Alert, AlertState
from lagwatch.model import Severity


@dataclass(frozen=True, slots=True)
class Transition:
    transition: AlertState  # firing | resolved
    at: float
    key: str
    rule: str
    severity: Severity  # at firing; the highest it reached, at resolution
    cluster: str
    group: str | None
    labels: dict[str, str]
    summary: str
    details: dict[str, object]
    started_at: float  # when the condition was first seen (pending)
    fired_at: float
    resolved_at: float | None
    peak_lag: int | None

    def alert_row(self) -> dict[str, object]:
        """The alert's columns as the lake's alert rows and the backtest's output rows both have them."""
        return {
            "key": self.key,
            "rule": self.rule,
            "severity": self.severity.value,
            "group": self.group,
            "labels_json": json.dumps(self.labels, sort_keys=True),
            "summary": self.summary,
            "started_at": self.started_at,
            "fired_at": self.fired_at,
            "resolved_at": self.resolved_at,
            "peak_lag": self.peak_lag,
        }


@dataclass
class _Seen:
    alert: Alert
    fired_at: float
    peak_lag: int | None
    worst: Severity


@dataclass
class TransitionTracker:
    cluster: str
    firing: dict[str, _Seen] = field(default_factory=dict)

    def seed(self, book: AlertBook) -> None:
        """Alerts already firing (restored after a restart) are known, not new."""
        for alert in book.alerts.values():
            if alert.cluster == self.cluster and alert.state == AlertState.FIRING and alert.fired_at is not None:
                self.firing[alert.key] = _Seen(alert, alert.fired_at, _lag(alert), alert.severity)

    def observe(self, book: AlertBook, now: float) -> list[Transition]:
        out: list[Transition] = []
        for alert in book.alerts.values():
            if alert.cluster != self.cluster or alert.fired_at is None:
                continue
            seen = self.firing.get(alert.key)
            if seen is not None and seen.fired_at != alert.fired_at:  # resolved and fired again in between
                out.append(self._resolved(seen, now))
                seen = None
            if alert.state == AlertState.FIRING:
                if seen is None:
                    seen = self.firing[alert.key] = _Seen(alert, alert.fired_at, _lag(alert), alert.severity)
                    out.append(_transition(AlertState.FIRING, alert, now, None, seen.peak_lag, alert.severity))
                else:
                    seen.alert = alert
                    seen.peak_lag = _max(seen.peak_lag, _lag(alert))
                    if alert.severity.rank > seen.worst.rank:
                        seen.worst = alert.severity
        for key, seen in list(self.firing.items()):
            now_alert = book.alerts.get(key)
            if now_alert is None or now_alert.state == AlertState.RESOLVED or now_alert.fired_at != seen.fired_at:
                if (
                    now_alert is not None
                    and now_alert.state == AlertState.RESOLVED
                    and now_alert.fired_at == seen.fired_at
                ):
                    seen.alert = now_alert
                out.append(self._resolved(seen, now))
        return out

    def _resolved(self, seen: _Seen, now: float) -> Transition:
        del self.firing[seen.alert.key]
        resolved_at = seen.alert.resolved_at if seen.alert.state == AlertState.RESOLVED else now
        return _transition(AlertState.RESOLVED, seen.alert, now, resolved_at, seen.peak_lag, seen.worst)


def _lag(alert: Alert) -> int | None:
    lag = alert.details.get("lag")
    return lag if isinstance(lag, int) and not isinstance(lag, bool) else None


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _transition(
    kind: AlertState, alert: Alert, now: float, resolved_at: float | None, peak: int | None, severity: Severity
) -> Transition:
    return Transition(
        transition=kind,
        at=now,
        key=alert.key,
        rule=alert.rule,
        severity=severity,
        cluster=alert.cluster,
        group=alert.group,
        labels=dict(alert.labels),
        summary=alert.summary,
        details=dict(alert.details),
        started_at=alert.started_at,
        fired_at=alert.fired_at if alert.fired_at is not None else now,
        resolved_at=resolved_at,
        peak_lag=peak,
    )
