"""User-supplied regexes: label matchers (silences, notifier routes), name filters (groups, topics), rule overrides.

Every one runs on RE2 (google-re2), which matches in time linear in the text: a pattern such as `(.*)*!` from a
silence, a route or an API call cannot hang a poll or the notifier on a long label, as Python's backtracking `re`
would. Semantics are Prometheus's and Alertmanager's: the pattern must match the whole value (RE2 syntax, so no
backreferences nor lookarounds; such a pattern is a validation error naming its field). Patterns are compiled
once and cached.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]  # google-re2 ships no type hints


class CompiledPattern(Protocol):
    def fullmatch(self, text: str) -> Any: ...


class _Options(re2.Options):  # type: ignore[misc]
    """RE2's defaults, but a rejected pattern raises without RE2 also printing it on stderr (which would break the
    one-line error of the command line)."""

    def __init__(self) -> None:
        super().__init__()
        self.log_errors = False
        # `.` matches a newline too, as in Prometheus 3 and Alertmanager: the default group filter `.*` must match
        # every group id, and a client may put a newline in one (it was left unwatched, without a word).
        self.dot_nl = True


_OPTIONS = _Options()


@functools.lru_cache(maxsize=4096)  # bounded: silences created through the API bring patterns of their own
def compile_pattern(pattern: str) -> CompiledPattern:
    """The compiled RE2 pattern, or a ValueError saying what RE2 rejects (one line, without the pattern)."""
    try:
        compiled: CompiledPattern = re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0] if e.args else e
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(text.splitlines()[0] if text else "rejected by RE2") from None
    return compiled


def check_pattern(pattern: str) -> str:
    """For validators: the pattern itself, or a ValueError `invalid regex '...': <why>`."""
    try:
        compile_pattern(pattern)
    except ValueError as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from None
    return pattern


def check_patterns(patterns: Sequence[str]) -> Sequence[str]:
    """For validators of a list of patterns: `check_pattern` on each."""
    for pattern in patterns:
        check_pattern(pattern)
    return patterns


@functools.lru_cache(maxsize=65536)
def full_match(pattern: str, text: str) -> bool:
    """The pattern matches the whole text. Memoised: the same few (pattern, label value) pairs come back at every
    poll (rule names, severities, group names), and google-re2's Python wrapper takes about 7 us a match: 40,000
    inhibition checks were 0.3 s of a 100k-partition poll (bench/daemon_step_bench.py); a cache hit is 0.1 us."""
    return compile_pattern(pattern).fullmatch(text) is not None


def any_full_match(patterns: Iterable[str], text: str) -> bool:
    return any(full_match(p, text) for p in patterns)


def check_matchers(matchers: dict[str, str]) -> dict[str, str]:
    """For pydantic validators: every regex compiles, or a ValueError naming the label."""
    for label, pattern in matchers.items():
        try:
            check_pattern(pattern)
        except ValueError as e:
            raise ValueError(f"{label}: {e}") from None
    return matchers


def labels_match(matchers: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Every matcher's regex matches the whole value of its label (a missing label is the empty string)."""
    return all(full_match(pattern, labels.get(label, "")) for label, pattern in matchers.items())
