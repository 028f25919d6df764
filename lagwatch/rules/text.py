"""Human wording of figures in findings: durations, times, offsets."""

from __future__ import annotations

from datetime import UTC, datetime


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    minutes = int(seconds // 60)
    if minutes < 90:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def timestamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def partitions(items: list[tuple[str, int]], limit: int = 5) -> str:
    shown = ", ".join(f"{t}/{p}" for t, p in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
