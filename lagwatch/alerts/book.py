"""The alert lifecycle: findings + what was already known + now -> alert states and notifications to send.

Pure: `apply` and `due` take the time from their caller; persistence is plain JSON-able data.

  finding first seen            -> pending (firing at once when the rule has no `for`)
  pending for `for` seconds     -> firing
  finding gone, was pending     -> dropped silently: never announced, so never "resolved"
  finding gone, was firing      -> resolved
  alerts of a frozen scope (cluster down, group unreadable) neither fire nor resolve; pending ones are dropped,
  so that after the outage their `for` counts fresh evidence only
  held alerts (a rule could not judge its window) neither fire nor resolve; pending ones restart their `for`

Notifications go per alert group (labels in `group_by`): the first after `group_wait`, changes at most every
`group_interval`, an unchanged firing group again after `repeat_interval`, and a last one when all resolved.
Silenced alerts and alerts inhibited by another firing alert (`inhibit_rules`, as Alertmanager's) are not notified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from lagwatch.alerts.settings import AlertsConfig
from lagwatch.matchers import labels_match
from lagwatch.model import Finding

_RANK = {"info": 0, "warning": 1, "critical": 2}


def for_elapsed(started_at: float, for_s: float, now: float) -> bool:
    """Whether a condition that began at `started_at` has held for `for_s`. Poll times jitter by milliseconds: a
    `for` of 20 s seen at polls 19.9998 s apart has held, not one poll short (5% of `for`, at most 1 s)."""
    return now - started_at >= for_s - min(1.0, 0.05 * for_s)


@dataclass
class Alert:
    key: str
    rule: str
    severity: str
    cluster: str
    group: str | None
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    runbook_url: str | None
    for_s: float
    state: str  # pending | firing | resolved
    started_at: float
    updated_at: float
    fired_at: float | None = None
    resolved_at: float | None = None

    def matchable(self) -> dict[str, str]:
        return {**self.labels, "rule": self.rule, "severity": self.severity}


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

    def matches(self, labels: dict[str, str]) -> bool:
        return labels_match(self.matchers, labels)


@dataclass
class AlertGroup:
    key: str
    labels: dict[str, str]
    notified: dict[str, str] = field(default_factory=dict)  # alert key -> severity, as last announced
    last_notified_at: float | None = None
    refs: dict[str, Any] = field(default_factory=dict)  # per notifier: where its message lives (Slack ts, ...)


@dataclass(frozen=True)
class Notification:
    id: str
    group_key: str
    group_labels: dict[str, str]
    kind: str  # firing | update | repeat | resolved
    severity: str
    created_at: float
    alerts: tuple[dict[str, Any], ...]  # the group's firing alerts, then those resolved since the last one

    @property
    def firing(self) -> list[dict[str, Any]]:
        return [a for a in self.alerts if a["state"] == "firing"]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "alerts": list(self.alerts)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Notification:
        return cls(**{**raw, "alerts": tuple(raw["alerts"])})


@dataclass
class AlertBook:
    config: AlertsConfig
    alerts: dict[str, Alert] = field(default_factory=dict)
    groups: dict[str, AlertGroup] = field(default_factory=dict)
    silences: list[Silence] = field(default_factory=list)
    sequence: int = 0

    # -- alert states -------------------------------------------------------------------------------------------

    def active_severities(self, cluster: str) -> dict[str, str]:
        """Severity of each pending or firing alert of `cluster`, for rules with hysteresis."""
        return {a.key: a.severity for a in self.alerts.values() if a.cluster == cluster and a.state != "resolved"}

    def apply(
        self,
        cluster: str,
        findings: Iterable[Finding],
        frozen_groups: frozenset[str] | None,
        now: float,
        held: frozenset[str] = frozenset(),
    ) -> None:
        seen = set()
        for f in findings:
            seen.add(f.key)
            alert = self.alerts.get(f.key)
            if alert is None or alert.state == "resolved":
                alert = Alert(
                    key=f.key,
                    rule=f.rule,
                    severity=f.severity,
                    cluster=f.cluster,
                    group=f.group,
                    labels=dict(f.labels),
                    summary=f.summary,
                    details=dict(f.details),
                    runbook_url=f.runbook_url,
                    for_s=f.for_s,
                    state="pending",
                    started_at=now,
                    updated_at=now,
                )
                self.alerts[f.key] = alert
            alert.severity, alert.summary, alert.details = f.severity, f.summary, dict(f.details)
            alert.labels, alert.for_s, alert.runbook_url, alert.updated_at = dict(f.labels), f.for_s, f.runbook_url, now
            if alert.state == "pending" and for_elapsed(alert.started_at, alert.for_s, now):
                alert.state, alert.fired_at = "firing", now
        for key, alert in list(self.alerts.items()):
            if alert.cluster != cluster or key in seen or alert.state == "resolved":
                continue
            frozen = (frozen_groups is None and alert.rule != "cluster_unreachable") or (
                frozen_groups is not None and alert.group in frozen_groups
            )
            if frozen:
                # Nothing is known of this scope now. A pending alert is dropped (never announced): after the
                # outage its condition must hold for its whole `for` again, on fresh evidence.
                if alert.state == "pending":
                    del self.alerts[key]
                continue
            if key in held:
                if alert.state == "pending":
                    alert.started_at = now
                continue
            if alert.state == "pending":
                del self.alerts[key]
            else:
                alert.state, alert.resolved_at, alert.updated_at = "resolved", now, now

    def forget_pending(self, cluster: str) -> None:
        """After a blind spell (lagwatch down, polls skipped): pending alerts of `cluster` start over."""
        for key in [k for k, a in self.alerts.items() if a.cluster == cluster and a.state == "pending"]:
            del self.alerts[key]

    # -- notifications ------------------------------------------------------------------------------------------

    def group_key(self, alert: Alert) -> tuple[str, dict[str, str]]:
        labels = {name: alert.labels.get(name, "") for name in self.config.group_by}
        return "|".join(f"{k}={v}" for k, v in labels.items()), labels

    def silenced(self, alert: Alert, now: float) -> Silence | None:
        labels = alert.matchable()
        return next((s for s in self.silences if s.active(now) and s.matches(labels)), None)

    def inhibited(self, alert: Alert, sources: list[Alert]) -> bool:
        """Whether another firing alert inhibits this one (Alertmanager's inhibition: one story per incident)."""
        labels = alert.matchable()
        for rule in self.config.inhibit_rules:
            if not labels_match(rule.target, labels):
                continue
            for source in sources:
                if (
                    source.key != alert.key
                    and labels_match(rule.source, source.matchable())
                    and all(source.labels.get(name, "") == alert.labels.get(name, "") for name in rule.equal)
                ):
                    return True
        return False

    def due(self, now: float) -> list[Notification]:
        """Notifications to send now. Their effect on the groups is recorded at once (they go to the outbox)."""
        sources = [a for a in self.alerts.values() if a.state == "firing"] if self.config.inhibit_rules else []
        by_group: dict[str, list[Alert]] = {}
        for alert in self.alerts.values():
            gkey, labels = self.group_key(alert)
            by_group.setdefault(gkey, []).append(alert)
            self.groups.setdefault(gkey, AlertGroup(gkey, labels))
        out: list[Notification] = []
        for gkey, group in list(self.groups.items()):
            alerts = by_group.get(gkey, [])
            firing = [
                a
                for a in alerts
                if a.state == "firing" and self.silenced(a, now) is None and not self.inhibited(a, sources)
            ]
            current = {a.key: a.severity for a in firing}
            resolved = [a for a in alerts if a.state == "resolved" and a.key in group.notified]
            kind = self._kind(group, firing, current, resolved, now)
            if kind is not None:
                out.append(self._notify(group, kind, firing, resolved, now))
                group.notified, group.last_notified_at = current, now
            else:
                # Alerts silenced since the last notification leave quietly, without a "resolved".
                for k in [
                    k
                    for k in group.notified
                    if k not in current and k in self.alerts and self.alerts[k].state == "firing"
                ]:
                    del group.notified[k]
            # Resolved alerts are done once announced, or if they never were.
            for a in alerts:
                if a.state == "resolved" and a.key not in group.notified:
                    self.alerts.pop(a.key, None)
            if not group.notified and not any(a.key in self.alerts for a in alerts):
                del self.groups[gkey]
        return out

    def _kind(
        self, group: AlertGroup, firing: list[Alert], current: dict[str, str], resolved: list[Alert], now: float
    ) -> str | None:
        cfg = self.config
        if not group.notified:
            if firing and now - min(now if a.fired_at is None else a.fired_at for a in firing) >= cfg.group_wait_s:
                return "firing"
            return None
        since_last = now - (group.last_notified_at or 0.0)
        announced = {k: s for k, s in group.notified.items() if k in current or k in {a.key for a in resolved}}
        if current != announced or resolved:
            if since_last < cfg.group_interval_s:
                return None
            if not current:
                if cfg.send_resolved:
                    return "resolved"
                group.notified = {}
                return None
            return "update"
        if current and since_last >= cfg.repeat_interval_s:
            return "repeat"
        return None

    def _notify(
        self, group: AlertGroup, kind: str, firing: list[Alert], resolved: list[Alert], now: float
    ) -> Notification:
        self.sequence += 1
        alerts = sorted(firing, key=lambda a: (-_RANK.get(a.severity, 0), a.key)) + sorted(
            resolved, key=lambda a: a.key
        )
        severity = max((a.severity for a in firing), key=lambda s: _RANK.get(s, 0), default="resolved")
        return Notification(
            id=f"{self.sequence:08d}",
            group_key=group.key,
            group_labels=dict(group.labels),
            kind=kind,
            severity=severity,
            created_at=now,
            alerts=tuple(asdict(a) for a in alerts),
        )

    def fingerprint(self) -> tuple[object, ...]:
        """What must survive a restart: alert states, what each group announced, silences. Not the figures in
        summaries, which the next poll brings back."""
        return (
            self.sequence,
            tuple(sorted((a.key, a.state, a.severity) for a in self.alerts.values())),
            tuple(sorted((g.key, tuple(sorted(g.notified.items())), g.last_notified_at) for g in self.groups.values())),
            tuple(s.id for s in self.silences),
        )

    # -- persistence --------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "alerts": [asdict(a) for a in self.alerts.values()],
            "groups": [asdict(g) for g in self.groups.values()],
            "silences": [asdict(s) for s in self.silences if s.created_by != "config"],
        }

    @classmethod
    def from_json(cls, config: AlertsConfig, raw: dict[str, Any]) -> AlertBook:
        book = cls(config=config, sequence=raw.get("sequence", 0))
        for a in raw.get("alerts", []):
            book.alerts[a["key"]] = Alert(**a)
        for g in raw.get("groups", []):
            book.groups[g["key"]] = AlertGroup(**g)
        book.silences = [Silence(**s) for s in raw.get("silences", [])]
        return book

    def load_config_silences(self) -> None:
        self.silences = [s for s in self.silences if s.created_by != "config"]
        for i, s in enumerate(self.config.silences):
            self.silences.append(
                Silence(
                    id=f"config-{i}",
                    matchers=dict(s.matchers),
                    ends_at=s.ends_at.timestamp(),
                    starts_at=s.starts_at.timestamp() if s.starts_at else None,
                    comment=s.comment,
                )
            )
