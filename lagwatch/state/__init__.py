"""EDGE: atomic persistence of alert state, the notification outbox and each cluster's history."""

from lagwatch.state.db import StateClosedError
from lagwatch.state.store import StateLockedError, StateStore

__all__ = ["StateClosedError", "StateLockedError", "StateStore"]
