"""CORE: the alert lifecycle (pending, firing, resolved; grouped, repeated, silenced). No I/O, no clock reads."""

from lagwatch.alerts.book import Alert, AlertBook, AlertGroup, Notification, Receiver, Silence, Storm
from lagwatch.alerts.settings import AlertsConfig, SilenceConfig

__all__ = [
    "Alert",
    "AlertBook",
    "AlertGroup",
    "AlertsConfig",
    "Notification",
    "Receiver",
    "Silence",
    "SilenceConfig",
    "Storm",
]
