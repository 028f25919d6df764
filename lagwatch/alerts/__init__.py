"""CORE: the alert side (no I/O, no clock reads), at Alertmanager's seams:
records (typed contracts) -> lifecycle (pending, firing, resolved) -> muting (silences, inhibition) ->
groups and nflog (what each receiver was told; when it is owed more) and storms -> book (the whole, and `due`).
transitions (firing and resolved, for the lake and the backtest) and restart (what a start restores)."""

from lagwatch.alerts.book import AlertBook
from lagwatch.alerts.groups import AlertGroup
from lagwatch.alerts.muting import Silence
from lagwatch.alerts.records import (
    Alert,
    AlertRecord,
    AlertState,
    Notification,
    NotificationKind,
    Receiver,
    StormSummary,
)
from lagwatch.alerts.settings import AlertsConfig, SilenceConfig
from lagwatch.alerts.storms import Storm
from lagwatch.model import Severity

__all__ = [
    "Alert",
    "AlertBook",
    "AlertGroup",
    "AlertRecord",
    "AlertState",
    "AlertsConfig",
    "Notification",
    "NotificationKind",
    "Receiver",
    "Severity",
    "Silence",
    "SilenceConfig",
    "Storm",
    "StormSummary",
]
