"""Storms: when more than `storm_threshold` alert groups of one cluster would start firing for a receiver at once,
it gets one summary for the cluster instead (counts by rule, the worst groups), and an update when the storm ends;
the groups are tracked and resolve one by one as always (API, metrics), quietly for that receiver."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lagwatch.alerts.groups import AlertGroup
from lagwatch.alerts.nflog import NotificationLog
from lagwatch.alerts.records import Alert, AlertRecord, Notification, NotificationKind, StormSummary
from lagwatch.alerts.settings import AlertsConfig
from lagwatch.model import SEVERITY_OF, Severity, severity_rank, worst


@dataclass
class Storm:
    """Alert groups of one cluster announced to one receiver as a single summary."""

    key: str
    receiver: str
    cluster: str
    members: dict[str, str] = field(default_factory=dict)  # group key -> its worst severity now
    last_notified_at: float = 0.0
    # The members as the last summary told them: a group new or worse since is news for the next summary.
    announced: dict[str, str] = field(default_factory=dict)
    # A summary of it reached the receiver (its message exists): only then is its end told. A storm whose every
    # summary was refused ended with a "resolved" posted as a message of its own, for a storm nobody saw.
    told: bool = False


def storm_key(receiver: str, cluster: str) -> str:
    return f"storm|{receiver}|{cluster}"


@dataclass
class StormDesk:
    """The storms under way, per receiver and cluster, with what the book gives them to summarise."""

    config: AlertsConfig
    storms: dict[str, Storm]
    groups: dict[str, AlertGroup]
    alerts: Mapping[str, Alert]
    next_id: Callable[[], str]
    log: NotificationLog

    def joined(
        self, receiver: str, cluster: str, firsts: list[tuple[AlertGroup, list[Alert]]], now: float
    ) -> list[Notification]:
        """Groups starting to fire for `receiver` join its storm of `cluster` (made now if there is none)."""
        key = storm_key(receiver, cluster)
        storm = self.storms.get(key)
        kind = NotificationKind.UPDATE if storm is not None else NotificationKind.FIRING
        if storm is None:
            storm = self.storms[key] = Storm(key, receiver, cluster)
        for group, firing in firsts:
            storm.members[group.key] = worst(a.severity for a in firing) or Severity.INFO
            group.set_storm(receiver, key)
            self.log.quietly(group, receiver, {a.key: a.severity for a in firing}, now)
        if kind == NotificationKind.UPDATE and now - storm.last_notified_at < self.config.group_interval_s:
            return []  # joined quietly: the summary after group_interval counts them (due)
        return [self._summary(storm, kind, now)]

    def due(self, now: float) -> list[Notification]:
        """Each storm's members as they are now (groups resolved leave, a group's worst severity follows its
        alerts); then its summary when due: "update" once group_interval is over if a group joined or got worse
        since the last summary, "repeat" after repeat_interval, "resolved" when the last group has left."""
        out = []
        cfg = self.config
        for key, storm in list(self.storms.items()):
            still = {}
            for g in storm.members:
                group = self.groups.get(g)
                if group is None or group.storm_of(storm.receiver) != key:
                    continue
                told = self.log.told(group, storm.receiver)
                still[g] = max(told.values(), key=severity_rank, default=storm.members[g])
            storm.members = still
            if not still:
                del self.storms[key]
                if cfg.send_resolved and storm.told:
                    out.append(self._summary(storm, NotificationKind.RESOLVED, now))
                continue
            since_last = now - storm.last_notified_at
            announced = storm.announced
            news = any(
                g not in announced or severity_rank(s) > severity_rank(announced[g]) for g, s in still.items()
            )  # a group joined or got worse (groups that resolve leave quietly: the storm's end says it)
            if news and since_last >= cfg.group_interval_s:
                out.append(self._summary(storm, NotificationKind.UPDATE, now))
            elif since_last >= cfg.repeat_interval_s:
                out.append(self._summary(storm, NotificationKind.REPEAT, now))
        return out

    def _summary(self, storm: Storm, kind: NotificationKind, now: float) -> Notification:
        notification_id = self.next_id()
        storm.last_notified_at, storm.announced = now, dict(storm.members)
        members = [self.groups[g] for g in storm.members if g in self.groups]
        alerts = [self.alerts[k] for g in members for k in self.log.told(g, storm.receiver) if k in self.alerts]
        by_rule: dict[str, int] = {}
        for a in alerts:
            by_rule[a.rule] = by_rule.get(a.rule, 0) + 1
        worst_alerts = sorted(alerts, key=lambda a: (-a.severity.rank, -a.lag, a.key))[:10]
        severity = max((SEVERITY_OF[s] for s in storm.members.values()), key=severity_rank, default=None)
        return Notification(
            id=notification_id,
            group_key=storm.key,
            group_labels={"cluster": storm.cluster, "group": ""},
            kind=kind,
            severity=severity if kind != NotificationKind.RESOLVED else None,
            created_at=now,
            alerts=tuple(AlertRecord.of(a) for a in worst_alerts),
            receiver=storm.receiver,
            storm=StormSummary(
                cluster=storm.cluster,
                groups_firing=len(members),
                alerts_by_rule=dict(sorted(by_rule.items())),
                worst_groups=tuple(sorted({a.group or "" for a in worst_alerts})),
            ),
        )
