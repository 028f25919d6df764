"""CORE: what lagwatch has seen over time, and the measures drawn from it (lag in seconds, rates, ETA).

No I/O and no clock reads: time always comes in from the caller (a snapshot's time, or `now`).
"""

from lagwatch.history.codec import HistoryCapture
from lagwatch.history.exact_clocks import ExactClocks, compact_records
from lagwatch.history.measures import GroupMeasure, LagTime, PartitionMeasure, lag_seconds, measure_group
from lagwatch.history.store import ClusterHistory, polls_to_keep
from lagwatch.history.timeline import LogEndTimeline
from lagwatch.history.tracks import (
    LONGEST_WAIT_KEPT_S,
    Clock,
    GroupTrack,
    PartitionProgress,
    Sample,
    Vanished,
    stall_threshold,
    trusted_cadence,
)

__all__ = [
    "LONGEST_WAIT_KEPT_S",
    "Clock",
    "ClusterHistory",
    "ExactClocks",
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
