"""User-supplied regexes run on RE2: whole-value matching, linear time on catastrophic patterns, patterns RE2
rejects named as config errors, compiled once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lagwatch import matchers
from lagwatch.alerts import AlertBook, AlertsConfig, Receiver, Silence
from lagwatch.config import NameFilter, load_settings
from lagwatch.errors import ConfigError
from lagwatch.model import Finding
from lagwatch.rules.settings import Match
from tests.conftest import run_lagwatch

# Each takes exponential time in a backtracking engine on a long text that almost matches.
CATASTROPHIC = ["(.*)*!", "(a+)+!", "(a|aa)*!", "(.*a){20}!"]
LONG = "a" * 50_000


def _timed(check: object) -> float:
    started = time.perf_counter()
    assert callable(check)
    assert check() is False
    return time.perf_counter() - started


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_match_a_50k_label_in_linear_time(pattern: str) -> None:
    silence = Silence("s1", {"group": pattern}, ends_at=10.0)
    receiver = Receiver("slack", matchers=(("group", pattern),))
    group_filter = NameFilter(include=[pattern])
    override = Match(group=pattern)
    book = AlertBook(AlertsConfig(group_wait_s=0))
    book.apply(
        "prod", [Finding("lag", "warning", "prod", LONG, {"cluster": "prod", "group": LONG}, "s")], frozenset(), 0
    )
    book.silences.append(silence)
    (alert,) = book.alerts.values()
    took = [
        _timed(lambda: book.silenced(alert, 0.0) is not None),
        _timed(lambda: receiver.accepts(alert)),
        _timed(lambda: group_filter.matches(LONG)),
        _timed(lambda: override.matches("prod", LONG, None)),
    ]
    assert max(took) < 0.1, took


def test_whole_value_semantics_as_alertmanager() -> None:
    route = NameFilter(include=["pay.*"], exclude=["payments-test|.*-dlq"])
    assert route.matches("payments") and route.matches("pay")
    assert not route.matches("xpayments")  # anchored at the start
    assert not route.matches("payments-test") and not route.matches("pay-dlq")  # alternation anchored as a whole
    assert not NameFilter(include=["a|b"]).matches("ab")
    assert matchers.labels_match({"team": "(?i)PAY"}, {"team": "pay"})
    assert matchers.labels_match({"team": ""}, {}) and not matchers.labels_match({"team": ".+"}, {})
    assert Match(cluster="prod-.*").matches("prod-eu", "g", "t") and not Match(cluster="prod").matches(
        "prod-eu", None, None
    )


def test_patterns_are_compiled_once() -> None:
    matchers.compile_pattern.cache_clear()
    f = NameFilter(include=["orders-[0-9]+"])
    for i in range(1000):
        f.matches(f"orders-{i}")
    info = matchers.compile_pattern.cache_info()
    assert info.misses == 1 and info.hits == 1000  # compiled by the validator, then reused by every match


def test_patterns_re2_rejects_are_errors_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        r"""
clusters:
  prod:
    bootstrap_servers: [127.0.0.1:9092]
    groups: {include: ['(a)\1']}
rules:
  overrides:
    - match: {group: '(?=orders)'}
      rules: {lag: {for_s: 10}}
alerts:
  silences:
    - matchers: {group: '(x)\1'}
      ends_at: 2030-01-01T00:00:00Z
notifiers:
  log:
    route: {matchers: {team: '(?<!a)b'}}
"""
    )
    with pytest.raises(ConfigError) as e:
        load_settings(config)
    problems = e.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "clusters.prod.groups.include",
        "rules.overrides.0.match",
        "alerts.silences.0.matchers",
        "notifiers.log.route.matchers",
    ], problems
    assert "invalid regex '(a)\\\\1': invalid escape sequence" in problems[0]
    assert "group: invalid regex '(?=orders)'" in problems[1]
    done = run_lagwatch("validate", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 4 and all(ln.startswith("lagwatch: config error: ") for ln in lines), done.stderr
    done = run_lagwatch("check", "--bootstrap-server", "127.0.0.1:9", "--group", "(a)\\1")
    assert done.returncode == 2 and done.stderr.strip().startswith("lagwatch: config error: --group: invalid regex")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@given(st.text())
@example("orders\nconsumers")
@example("")
def test_the_default_name_filter_keeps_what_re2_full_matches(name: str) -> None:
    """The default filter answers without RE2; what it keeps is what RE2's `.*` matches whole."""
    assert NameFilter().matches(name) == matchers.full_match(".*", name)
    assert NameFilter(include=[".*"], exclude=["x"]).matches(name) == (
        matchers.full_match(".*", name) and not matchers.full_match("x", name)
    )
