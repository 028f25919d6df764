"""EDGE: delivery of notifications (outbox, dispatcher thread, notifiers)."""

from lagwatch.notify.base import DeliveryError, Notifier
from lagwatch.notify.dispatcher import Dispatcher
from lagwatch.notify.log import LogNotifier
from lagwatch.notify.outbox import Delivery, Outbox

__all__ = ["Delivery", "DeliveryError", "Dispatcher", "LogNotifier", "Notifier", "Outbox"]
