"""Times as the pipeline jobs take them on the command line and say them."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime


def time_arg(value: str) -> float:
    """`--since` / `--until`: an ISO time or date, UTC unless it says, as epoch seconds."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO time (e.g. 2026-11-01 or 2026-11-01T12:00:00Z): {value!r}"
        ) from None
    t = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    try:
        datetime.fromtimestamp(t, UTC)  # the lake's date partitions need a date of years 1 to 9999 in UTC
    except (OverflowError, ValueError):
        raise argparse.ArgumentTypeError(f"out of range: {value!r}") from None
    return t


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def range_text(since: float | None, until: float | None) -> str:
    if since is None and until is None:
        return "(the lake is empty)"
    return f"between {iso(since) if since else 'the start'} and {iso(until) if until else 'the end'}"
