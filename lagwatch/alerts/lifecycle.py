"""The alert lifecycle: findings + the alerts already known + now -> each alert's state. Pure: time is passed in.

  finding first seen            -> pending (firing at once when the rule has no `for`)
  pending for `for` seconds     -> firing
  finding gone, was pending     -> dropped silently: never announced, so never "resolved"
  finding gone, was firing      -> resolved (after its rule's keep_firing_for_s)
  alerts of a frozen scope (cluster down, group unreadable) neither fire nor resolve; pending ones are dropped,
  so that after the outage their `for` counts fresh evidence only
  held alerts (a rule could not judge its window) neither fire nor resolve; pending ones restart their `for`

A pending alert a receiver still has as firing (it fired, resolved, and came back before that receiver was told of
the resolve) is resolved rather than dropped: `still_told` says which (the notification log knows)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from lagwatch.alerts.records import Alert, AlertState, for_elapsed
from lagwatch.model import SEVERITY_OF, Finding

StillTold = Callable[[Alert], bool]


def active_severities(alerts: Mapping[str, Alert], cluster: str) -> dict[str, str]:
    """Severity of each firing alert of `cluster`, and "pending" for each pending one: rules with hysteresis
    hold only what has fired (a pending alert's condition must hold in full for its whole `for`), and rules
    can hold both when they cannot judge."""
    return {
        a.key: a.severity if a.state == AlertState.FIRING else AlertState.PENDING.value
        for a in alerts.values()
        if a.cluster == cluster and a.state != AlertState.RESOLVED
    }


def apply(
    alerts: dict[str, Alert],
    cluster: str,
    findings: Iterable[Finding],
    frozen_groups: frozenset[str] | None,
    now: float,
    still_told: StillTold,
    held: frozenset[str] = frozenset(),
    partial: frozenset[tuple[str, str | None]] = frozenset(),
) -> None:
    """One poll's findings of `cluster`. `frozen_groups` None: the cluster could not be read at all.
    `partial`: (group, topic) read only in part this time, topic None for the group's own alerts; their alerts not
    found stay exactly as they are, and so do those found at a lower severity: what the rest says may raise them,
    never lower them (one poll without a partition's commit eased a critical lag to warning, and the next raised it
    again: two false updates)."""
    seen = set()
    for f in findings:
        key = f.key
        seen.add(key)
        alert = alerts.get(key)
        severity = SEVERITY_OF[f.severity]
        # The finding's own details, not a copy: every rule builds them per finding and nothing changes them in
        # place (an alert's are replaced whole at each poll). A copy per finding at every poll was 200,000 dicts a
        # step at 1M group-partitions, alive twice while the book took them. Not made a dict either: a lag
        # finding's are held compactly (rules.thresholds.LagDetails), made dicts where they leave the process.
        details = f.details
        if (
            partial
            and alert is not None
            and alert.state == AlertState.FIRING
            and (f.group, f.labels.get("topic")) in partial
            and severity.rank < alert.severity.rank
        ):
            continue
        if alert is None or alert.state == AlertState.RESOLVED:
            alert = Alert(
                key=key,
                rule=f.rule,
                severity=severity,
                cluster=f.cluster,
                group=f.group,
                labels=f.labels,  # the resolver's, shared with every finding and alert of this scope: no copy
                summary=f.summary,
                details=details,
                runbook_url=f.runbook_url,
                for_s=f.for_s,
                state=AlertState.PENDING,
                started_at=now,
                updated_at=now,
                keep_firing_for_s=f.keep_firing_for_s,
            )
            alerts[key] = alert
        else:
            alert.severity, alert.summary, alert.details = severity, f.summary, details
            if alert.labels is not f.labels:  # nearly always the same mapping (the resolver keeps it across polls)
                alert.labels = f.labels
            alert.for_s, alert.runbook_url, alert.updated_at = f.for_s, f.runbook_url, now
            alert.keep_firing_for_s = f.keep_firing_for_s
        if alert.state == AlertState.PENDING and for_elapsed(alert.started_at, alert.for_s, now):
            alert.state, alert.fired_at = AlertState.FIRING, now
    for key, alert in list(alerts.items()):
        if alert.cluster != cluster or key in seen or alert.state == AlertState.RESOLVED:
            continue
        if partial and (alert.group, alert.labels.get("topic")) in partial:
            continue
        frozen = (frozen_groups is None and alert.rule != "cluster_unreachable") or (
            frozen_groups is not None and alert.group in frozen_groups
        )
        if frozen:
            # Nothing is known of this scope now. A group that could not be read drops its pending alerts (never
            # announced): its condition must hold for its whole `for` again, on fresh evidence. A failed poll
            # of the whole cluster keeps them as they are: one failed poll in three dropped them all, and
            # nothing ever fired; after a real outage (a blind spell), forget_pending drops them.
            if alert.state == AlertState.PENDING and frozen_groups is not None:
                drop_pending(alerts, alert, now, still_told)
            continue
        if key in held:
            if alert.state == AlertState.PENDING:
                alert.started_at = now
            continue
        if alert.state == AlertState.PENDING:
            drop_pending(alerts, alert, now, still_told)
        elif now - alert.updated_at < alert.keep_firing_for_s:
            continue  # its condition comes and goes: one incident (Prometheus's keep_firing_for)
        else:
            resolve(alert, now)


def resolve(alert: Alert, now: float) -> None:
    alert.state, alert.resolved_at, alert.updated_at = AlertState.RESOLVED, now, now


def forget_pending(alerts: dict[str, Alert], cluster: str, still_told: StillTold) -> None:
    """After a blind spell (lagwatch down, polls skipped): pending alerts of `cluster` start over."""
    for alert in [a for a in alerts.values() if a.cluster == cluster and a.state == AlertState.PENDING]:
        drop_pending(alerts, alert, alert.updated_at, still_told)


def drop_pending(alerts: dict[str, Alert], alert: Alert, now: float, still_told: StillTold) -> None:
    """A pending alert that goes away was never announced, and is forgotten; unless a receiver still has it
    as firing (it fired, resolved within group_interval, and came back pending before that receiver was told
    of the resolve): then it is resolved, and that receiver gets its "resolved"."""
    if still_told(alert):
        resolve(alert, now)
    else:
        del alerts[alert.key]


def relabel(
    alerts: dict[str, Alert],
    labels_of: Callable[[Alert], tuple[Mapping[str, str], str]],
    now: float,
    still_told: StillTold,
) -> int:
    """Alerts whose labels the configuration now gives otherwise (a routing label added by an override, or
    `rules.labels` changed between two runs): the labels are part of an alert's key, so at the restart the
    alert under its old labels resolved, and the incident fired again under the new ones only after its `for`,
    its hysteresis lost (a lag between the resolve ratio and the threshold never paged again). Now the old
    labels end at once (each receiver told of them gets their "resolved", as Alertmanager ends a label set),
    and an alert under the new ones goes on from where the old one was: firing at once, at its severity.
    `labels_of` answers (labels, key suffix), as the rules' resolver does. Returns how many alerts moved."""
    moved = 0
    for key, alert in list(alerts.items()):
        if alert.state == AlertState.RESOLVED:
            continue  # its end is told under the labels its receivers have
        labels, suffix = labels_of(alert)
        new_key = alert.rule + suffix
        there = alerts.get(new_key)
        if new_key == key or (there is not None and there.state != AlertState.RESOLVED):
            continue  # a resolved one there is these labels' end still owed (labels changed back): it goes on
        alerts[new_key] = replace(alert, key=new_key, labels=dict(labels), updated_at=now)
        if alert.state == AlertState.PENDING:
            drop_pending(alerts, alert, now, still_told)
        else:
            resolve(alert, now)
        moved += 1
    return moved


def resolve_cluster(alerts: dict[str, Alert], cluster: str, now: float, still_told: StillTold) -> int:
    """Every alert of a cluster no longer configured (removed, or renamed) ends: nothing else ever would, and they
    were repeated for good. Firing ones resolve, pending ones are dropped. Returns how many were firing."""
    firing = sum(1 for a in alerts.values() if a.cluster == cluster and a.state == AlertState.FIRING)
    apply(alerts, cluster, [], frozenset(), now, still_told)
    return firing
