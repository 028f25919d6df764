"""What a start restores of the alert side, and what it changes in it before the first poll: pure, over the rows
the state database read (its damage, copies and set-asides are the state edge's; the logs, the daemon's).

- Rows of another shape are skipped one by one and reported, the others load (`AlertBook.from_json`).
- Silences of the configuration replace those of the last run's configuration; the API's are kept.
- Notification ids move past the clock (in milliseconds) at every start, so they go past every id an earlier run
  issued, from state older than the last run's too: a copy lagwatch fell back to, or a state directory an
  operator restored from a backup, which nothing on disk tells from the last run's (a receiver that takes an id
  once dropped the new ones as duplicates). Ids stay ahead unless a run issued more than 1,000 a second.
- Notifications still queued say what their receivers will have once delivered (the notification log's queue);
  one whose row cannot be read is never delivered: alerts it told as ended that the book let go come back.
- Alerts whose labels the configuration now gives otherwise go on under the new labels (the old ones resolve).
- Alerts of clusters no longer configured resolve: nothing else ever would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lagwatch.alerts.book import AlertBook
from lagwatch.alerts.records import Alert, Notification, Receiver
from lagwatch.alerts.settings import AlertsConfig


class RejectedRow(NamedTuple):
    table: str
    key: str
    why: str


class UnreadQueued(NamedTuple):
    """What can be read of a queued notification whose row cannot be: its receiver, group, time and alerts."""

    receiver: str
    group_key: str
    created_at: float
    alerts: list[Any]


@dataclass
class Restored:
    book: AlertBook
    rejected: list[RejectedRow] = field(default_factory=list)
    relabelled: int = 0  # alerts that went on under new labels
    resolved_clusters: dict[str, int] = field(default_factory=dict)  # cluster no longer configured -> alerts firing


def restore(
    config: AlertsConfig,
    saved: Mapping[str, Any],
    receivers: tuple[Receiver, ...],
    *,
    now: float,
    lost_state: bool,
    queued: Iterable[Notification],
    unread_queued: Iterable[UnreadQueued],
    labels_of: Callable[[Alert], tuple[Mapping[str, str], str]],
    clusters: Iterable[str],
) -> Restored:
    rejected: list[tuple[str, str, str]] = []
    book = AlertBook.from_json(config, dict(saved), receivers, rejected)
    book.load_config_silences()
    book.sequence = max(book.sequence, int(now * 1000))  # whatever `lost_state` says (module docstring)
    book.log.resume(queued, (r.name for r in receivers))
    for q in unread_queued:
        book.undelivered_raw(q.receiver, q.group_key, q.alerts)
    restored = Restored(book, [RejectedRow(*r) for r in rejected])
    restored.relabelled = book.relabel(labels_of, now)
    configured = set(clusters)
    for cluster in sorted({a.cluster for a in book.alerts.values()} - configured):
        restored.resolved_clusters[cluster] = book.resolve_cluster(cluster, now)
    return restored


def unread_queued(row: Any) -> UnreadQueued | None:
    """A queued notification's row that the outbox could not read, as far as it can be read, or None."""
    n = row.get("notification") if isinstance(row, dict) else None
    if not isinstance(n, dict) or not isinstance(n.get("group_key"), str) or not isinstance(row.get("notifier"), str):
        return None
    alerts, created_at = n.get("alerts"), n.get("created_at")
    if not isinstance(alerts, list) or not isinstance(created_at, int | float) or isinstance(created_at, bool):
        return None
    return UnreadQueued(row["notifier"], n["group_key"], float(created_at), alerts)
