"""CORE: what lagwatch has seen over time, and the measures drawn from it (lag in seconds, rates, ETA).

No I/O and no clock reads: time always comes in from the caller (a snapshot's time, or `now`).
"""

from lagwatch.history.measures import GroupMeasure, LagTime, PartitionMeasure, lag_seconds, measure_group
from lagwatch.history.store import (
    LONGEST_WAIT_KEPT_S,
    Clock,
    ClusterHistory,
    GroupTrack,
    HistoryCapture,
    PartitionProgress,
    Sample,
    Vanished,
    compact_records,
    polls_to_keep,
    stall_threshold,
    trusted_cadence,
)
from lagwatch.history.timeline import LogEndTimeline

__all__ = [
    "LONGEST_WAIT_KEPT_S",
    "Clock",
    "ClusterHistory",
    "GroupMeasure",
    "GroupTrack",
    "HistoryCapture",
    "LagTime",
    "LogEndTimeline",
    "PartitionMeasure",
    "PartitionProgress",
    "Sample",
    "Vanished",
    "compact_records",
    "lag_seconds",
    "measure_group",
    "polls_to_keep",
    "stall_threshold",
    "trusted_cadence",
]
