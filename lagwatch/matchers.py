"""Label matchers: a label name -> a regex that must match the whole value. Used by silences and notifier routes."""

from __future__ import annotations

import re
from collections.abc import Mapping


def check_matchers(matchers: dict[str, str]) -> dict[str, str]:
    """For pydantic validators: every regex compiles, or a ValueError naming the label."""
    for label, pattern in matchers.items():
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"{label}: invalid regex {pattern!r}: {e}") from None
    return matchers


def labels_match(matchers: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Every matcher's regex matches the whole value of its label (a missing label is the empty string)."""
    return all(re.fullmatch(pattern, labels.get(label, "")) is not None for label, pattern in matchers.items())
