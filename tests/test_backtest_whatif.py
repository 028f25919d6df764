"""A backtest candidate as an overlay on the recorded configuration, and the comparison of a replay with what the
daemon raised: on plain rows, without Spark or a broker."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lagwatch.pipeline.backtest import (
    RECORDED,
    BacktestError,
    Candidate,
    ClusterParams,
    candidate_config,
    check_candidates,
    load_candidate,
    overlay_changes,
    replay,
)
from lagwatch.pipeline.whatif import (
    Incident,
    RecordedTransition,
    compare,
    differences,
    leaves,
    match,
    overlay,
    ranked,
    recorded_incidents,
    totals,
)
from tests.synthetic import TP, Pipeline, group, snapshot

RULES = {
    "lag": {"warning": {"offsets": 20, "seconds": None}, "critical": {"offsets": 100}, "for_s": 0},
    "stopped": {"window_s": 4},
}
ALERTS = {"group_wait_s": 0, "group_interval_s": 1}


def recorded_params(rules: dict | None = None, alerts: dict | None = None, at: float = 0.0) -> ClusterParams:
    """A configuration as a daemon records it: the whole dump of its settings."""
    from lagwatch.alerts import AlertsConfig
    from lagwatch.rules import RulesConfig

    return ClusterParams(
        90.0,
        False,
        RulesConfig.model_validate(rules or RULES).model_dump(mode="json"),
        AlertsConfig.model_validate(alerts or ALERTS).model_dump(mode="json"),
        at,
        5.0,
    )


def candidate_file(tmp_path: Path, text: str, name: str = "cand") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


# -- the overlay --------------------------------------------------------------------------------------------------


def test_overlay_merges_mappings_and_replaces_everything_else() -> None:
    base = {"lag": {"warning": {"offsets": 20, "seconds": 60}, "for_s": 0}, "labels": {"team": "a"}, "overrides": [1]}
    extra = {"lag": {"warning": {"offsets": 200, "seconds": None}}, "overrides": [], "labels": {"tier": "1"}}
    assert overlay(base, extra) == {
        "lag": {"warning": {"offsets": 200, "seconds": None}, "for_s": 0},
        "labels": {"team": "a", "tier": "1"},
        "overrides": [],
    }
    assert base["lag"]["warning"]["offsets"] == 20  # the base is left as it was
    assert leaves(extra) == [("lag", "warning", "offsets"), ("lag", "warning", "seconds"), ("overrides",),
                             ("labels", "tier")]  # fmt: skip


def test_a_candidate_with_only_rules_lag_keeps_every_other_recorded_setting(tmp_path: Path) -> None:
    """It reset every other rule and alert setting to lagwatch's defaults (stopped's window to 300 s, group_wait to
    30 s): now only the lag thresholds it names change."""
    candidate = load_candidate(candidate_file(tmp_path, "rules:\n  lag: {warning: {offsets: 200}}\n"))
    assert candidate.alerts is None and candidate.rules == {"lag": {"warning": {"offsets": 200}}}
    params = recorded_params()
    rules, alerts = candidate_config(candidate, params)
    assert rules is not None and params.rules is not None
    assert rules["lag"]["warning"] == {"offsets": 200, "seconds": None}
    assert rules["lag"]["critical"] == params.rules["lag"]["critical"] and rules["stopped"]["window_s"] == 4
    assert {k: v for k, v in rules.items() if k != "lag"} == {k: v for k, v in params.rules.items() if k != "lag"}
    assert alerts == params.alerts
    assert candidate_config(Candidate(RECORDED, None, None), params) == (params.rules, params.alerts)
    line = overlay_changes(candidate, {"c": [params]}, ["c"])
    assert line == "candidate cand: overlay on the recorded configuration: rules.lag.warning.offsets 20 -> 200"


def test_the_overlay_follows_each_recorded_configuration() -> None:
    """A configuration recorded mid-range (the daemon restarted with other settings): the overlay goes on each."""
    candidate = Candidate("c", {"lag": {"critical": {"offsets": 1000}}}, None, "c.yaml")
    first, second = recorded_params(), recorded_params({**RULES, "stopped": {"window_s": 8}}, at=100.0)
    assert [candidate_config(candidate, p)[0]["stopped"]["window_s"] for p in (first, second)] == [4, 8]  # type: ignore[index]
    line = overlay_changes(Candidate("c", {"stopped": {"window_s": 4}}, None, "c.yaml"), {"x": [first, second]}, ["x"])
    assert line.endswith("rules.stopped.window_s (4 / 8) -> 4")


def test_where_no_configuration_was_recorded_the_overlay_goes_on_the_defaults() -> None:
    candidate = Candidate("c", {"lag": {"warning": {"offsets": 200}}}, None, "c.yaml")
    rules, alerts = candidate_config(candidate, ClusterParams(90.0, False, None, None))
    assert rules is not None and alerts is not None
    assert rules["lag"]["warning"] == {"offsets": 200, "seconds": 300.0} and alerts["group_wait_s"] == 30.0


def test_an_identical_candidate_changes_nothing(tmp_path: Path) -> None:
    import json

    params = recorded_params()
    path = candidate_file(tmp_path, json.dumps({"rules": RULES, "alerts": ALERTS}), "same")
    line = overlay_changes(load_candidate(path), {"c": [params]}, ["c"])
    assert line.startswith("candidate same: overlay on the recorded configuration: changes nothing recorded (as")


def test_a_value_invalid_alone_is_said_before_the_lake_is_read(tmp_path: Path) -> None:
    path = candidate_file(tmp_path, "rules:\n  stopped: {window_s: -4}\n")
    with pytest.raises(BacktestError, match=r"^--config .*cand\.yaml: rules\.stopped\.window_s: Input should be"):
        load_candidate(path)
    with pytest.raises(BacktestError, match="alerts: must be a mapping"):
        load_candidate(candidate_file(tmp_path, "alerts: [1]\n"))


def test_a_merge_that_does_not_validate_names_the_file_field_and_recorded_configuration(tmp_path: Path) -> None:
    """warning_fraction 0.95 validates over a recorded critical_fraction of 0.99, not over 0.92 (nor the defaults'
    0.9): a fault between values, said once the lake's configurations are known, naming the one it fails over."""
    path = candidate_file(tmp_path, "rules:\n  expiry: {warning_fraction: 0.95}\n")
    fine = recorded_params({**RULES, "expiry": {"critical_fraction": 0.99}})
    candidate = load_candidate(path)  # over the defaults it would not validate, but the fault is between values
    check_candidates([candidate], {"c": [fine]}, ["c"])
    low = recorded_params({**RULES, "expiry": {"critical_fraction": 0.92}}, at=1_790_000_000.0)
    with pytest.raises(BacktestError) as e:
        check_candidates([candidate], {"c": [fine, low]}, ["c"])
    assert str(e.value) == (
        f"--config {path}: rules.expiry: critical_fraction must not be below warning_fraction "
        "(merged over the configuration recorded for cluster c at 2026-09-21T14:13:20Z)"
    )


def test_the_replay_of_a_lag_only_candidate_keeps_the_recorded_stopped_rule() -> None:
    """In memory through the daemon's step: a group that stops for 30 polls pages `stopped` under the recorded
    4 s window; the lag-only candidate raises it too (under the defaults' 300 s window it never fired)."""
    t0 = 1_790_000_000.0
    p = Pipeline()
    rows: list[dict[str, object]] = []
    from lagwatch.lake.codec import snapshot_rows

    for i in range(40):
        stopped = 10 <= i < 30
        committed = 100 if stopped and i >= 10 else 10 * i
        snap = snapshot(
            t0 + 2 * i,
            [group("g", {TP: committed}, state="Empty" if stopped else "Stable", members=0 if stopped else 1)],
            {TP: 10 * i},
        )
        p.step(snap)
        columns = snapshot_rows(snap, {})
        rows += [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    params = recorded_params()
    lag_only = Candidate("lag10x", {"lag": {"warning": {"offsets": 200}, "critical": {"offsets": 1000}}}, None, "x")
    out = replay("c", rows, [Candidate(RECORDED, None, None), lag_only], params)
    fired = {(r["config"], r["rule"]) for r in out if r["kind"] == "alert"}
    assert ("recorded", "stopped") in fired and ("lag10x", "stopped") in fired
    assert ("recorded", "lag") in fired and ("lag10x", "lag") not in fired


# -- the comparison -----------------------------------------------------------------------------------------------


def inc(
    rule: str, severity: str, fired: float, resolved: float | None, group: str = "g", topic: str | None = "t"
) -> Incident:
    return Incident("c", group, topic, rule, severity, fired, resolved, f"{rule}|{group}|{topic}")


def test_recorded_transitions_become_incidents_within_the_replayed_range() -> None:
    def t(at: float, kind: str, fired: float, severity: str = "warning", key: str = "k") -> RecordedTransition:
        return RecordedTransition(
            "c", at, kind, key, "lag", severity, "g", "t", fired, at if kind == "resolved" else None
        )

    rows = [
        t(5, "resolved", 2, key="early"),  # fired before the range (its firing row is not in the lake either)
        t(10, "firing", 10),
        t(20, "resolved", 10, "critical"),  # the highest severity it reached, at resolution
        t(30, "firing", 30),
        t(90, "resolved", 30),  # after the range's last poll: still firing at its end
        t(40, "firing", 40, key="other-cluster"),
    ]
    rows[-1] = rows[-1]._replace(cluster="elsewhere")
    got = recorded_incidents(rows, {"c": (3.0, 60.0)})
    assert got.compared == [
        inc("lag", "critical", 10, 20)._replace(key="k"),
        inc("lag", "warning", 30, None)._replace(key="k", severity_final=False),  # its escalation is not recorded
    ]
    assert [i.key for i in got.before_range] == ["early"]


def tenfold() -> tuple[list[Incident], list[Incident]]:
    """The daemon's incidents, and a replay with lag thresholds ten times higher: the first lag warning is gone, the
    second incident fires 8 s later and no longer reaches critical, `stopped` is the same."""
    recorded = [
        inc("lag", "warning", 10, 15),
        inc("lag", "critical", 20, 40),
        inc("stopped", "critical", 5, 50, topic=None),
    ]
    replayed = [inc("lag", "warning", 28, 36), inc("stopped", "critical", 5, 50, topic=None)]
    return recorded, replayed


def test_matching_pairs_overlapping_incidents_of_the_same_group_topic_and_rule() -> None:
    recorded, replayed = tenfold()
    matches = match(recorded, replayed)
    outcomes = sorted((m.recorded.rule, m.recorded.fired_at, m.outcome, m.shift_s) for m in matches if m.recorded)
    assert outcomes == [("lag", 10, "lost", None), ("lag", 20, "later", 8.0), ("stopped", 5, "same", 0.0)]
    assert len(matches) == 3
    # Not the same incident: another topic, or spans that do not overlap.
    apart = match(
        [inc("lag", "warning", 10, 15)], [inc("lag", "warning", 16, 20), inc("lag", "warning", 10, 15, topic="u")]
    )
    assert [m.outcome for m in apart] == ["lost", "gained", "gained"]
    # Still firing at the end of the range overlaps anything after it fired.
    assert match([inc("lag", "warning", 10, None)], [inc("lag", "warning", 100, None)])[0].outcome == "later"


def test_the_comparison_per_rule_and_severity() -> None:
    recorded, replayed = tenfold()
    rows = {(r.rule, r.severity): r for r in compare(match(recorded, replayed))}
    assert list(rows) == [("lag", "critical"), ("lag", "warning"), ("stopped", "critical")]
    critical, warning, stopped = rows.values()
    assert (critical.recorded, critical.replayed, critical.lost, critical.other_severity) == (1, 0, 0, 1)
    assert (critical.pages_lost, critical.pages_gained, critical.later, critical.later_median_s) == (1, 0, 1, 8.0)
    assert (warning.recorded, warning.replayed, warning.lost, warning.gained, warning.pages_lost) == (1, 1, 1, 0, 0)
    assert not stopped.differs() and stopped.recorded == stopped.replayed == 1
    # Earlier and later: median and worst, in seconds.
    shifted = compare(match([inc("lag", "warning", t, t + 5, group=f"g{t}") for t in (0, 10, 20)],
                            [inc("lag", "warning", t + d, t + 5, group=f"g{t}") for t, d in ((0, -1), (10, -3), (20, 4))]))  # fmt: skip
    assert [(r.earlier, r.earlier_median_s, r.earlier_worst_s, r.later, r.later_worst_s) for r in shifted] == [
        (2, 2.0, 3.0, 1, 4.0)
    ]


def test_totals_rank_candidates_by_pages_then_pages_lost() -> None:
    recorded, replayed = tenfold()
    loud = totals("loud", match(recorded, [*replayed, inc("lag", "critical", 60, None, group="h")]))
    quiet = totals("quiet", match(recorded, replayed))
    same = totals("same", match(recorded, recorded))
    assert (quiet.pages_replayed, quiet.pages_lost, quiet.alerts_lost, quiet.later) == (1, 1, 1, 1)
    assert (loud.pages_replayed, loud.pages_gained, same.pages_replayed) == (2, 1, 2)
    assert [t.config for t in ranked([loud, same, quiet])] == ["quiet", "same", "loud"]


def test_where_the_recorded_replay_differs_and_why() -> None:
    recorded = [inc("lag", "warning", 12, 20), inc("stopped", "critical", 500, 600), inc("lag", "warning", 1000, 1100)]
    replayed = [inc("lag", "warning", 14, 20), inc("stopped", "critical", 500, 600), inc("lag", "warning", 1000, 1090)]
    diffs = differences(match(recorded, replayed), {"c": (10.0, 2000.0)}, {"c": 60.0}, {"c": [980.0]})
    assert [(d.what, d.reason is not None) for d in diffs] == [("later", True), ("resolved", True)]
    assert diffs[0].reason is not None and "first 60 s" in diffs[0].reason
    assert diffs[1].reason is not None and "restart" in diffs[1].reason
    assert differences(match(recorded, recorded), {"c": (10.0, 2000.0)}, {"c": 60.0}, {}) == []
    far = differences(match([inc("lag", "warning", 500, None)], []), {"c": (10.0, 2000.0)}, {"c": 60.0}, {})
    assert [(d.what, d.reason) for d in far] == [("lost", None)]
    assert math.isinf(inc("lag", "warning", 1, None).end())


def test_one_replayed_incident_covering_two_recorded_ones_is_a_merge_not_a_loss() -> None:
    """A candidate with a longer hysteresis keeps firing through the gap where the daemon resolved and fired again:
    its one incident covers both. The second recorded one was counted lost (and its page lost), though the replay
    was firing all along."""
    from lagwatch.pipeline.whatif import Outcome, difference_lines

    recorded = [inc("lag", "critical", 10, 20), inc("lag", "critical", 30, 40), inc("lag", "warning", 100, 110)]
    replayed = [inc("lag", "critical", 10, 40), inc("lag", "warning", 100, 110)]
    matches = match(recorded, replayed)
    assert sorted((m.outcome, m.recorded.fired_at if m.recorded else None) for m in matches) == [
        (Outcome.MERGED, 30), (Outcome.SAME, 10), (Outcome.SAME, 100)
    ]  # fmt: skip
    merged = next(m for m in matches if m.outcome is Outcome.MERGED)
    assert merged.replayed == replayed[0] and merged.shift_s is None
    t = totals("hysteresis", matches)
    assert (t.alerts_recorded, t.alerts_replayed, t.alerts_lost, t.alerts_gained) == (3, 2, 0, 0)
    assert (t.pages_recorded, t.pages_replayed, t.pages_lost, t.merged, t.split) == (2, 1, 0, 1, 0)
    c = next(r for r in compare(matches) if r.severity == "critical")
    assert (c.recorded, c.replayed, c.lost, c.merged, c.pages_lost) == (2, 1, 0, 1, 0) and c.differs()
    diffs = differences(matches, {"c": (0.0, 1000.0)}, {"c": 0.0}, {})
    assert [d.what for d in diffs] == ["resolved", "merged"]  # the first one resolved later, at the second's end
    line = difference_lines(diffs, lambda t: f"t{t:g}")[1]
    assert "raised lag critical c/g/t again at t30; the replay kept firing the one it raised at t10" in line


def test_two_replayed_incidents_within_one_recorded_one_are_a_split_not_a_gain() -> None:
    """The reverse: a candidate that resolves sooner fires twice where the daemon fired once; the second piece was
    counted gained (and a page gained)."""
    from lagwatch.pipeline.whatif import Outcome

    recorded = [inc("lag", "critical", 10, 50)]
    replayed = [inc("lag", "critical", 12, 20), inc("lag", "critical", 30, 50), inc("lag", "critical", 60, 70)]
    matches = match(recorded, replayed)
    assert sorted((m.outcome, m.replayed.fired_at if m.replayed else None) for m in matches) == [
        (Outcome.GAINED, 60), (Outcome.LATER, 12), (Outcome.SPLIT, 30)
    ]  # fmt: skip
    t = totals("eager", matches)
    assert (t.alerts_recorded, t.alerts_replayed, t.alerts_gained, t.split, t.merged) == (1, 3, 1, 1, 0)
    assert (t.pages_recorded, t.pages_replayed, t.pages_gained, t.later) == (1, 3, 1, 1)
    (row,) = compare(matches)
    assert (row.recorded, row.replayed, row.gained, row.split, row.later, row.later_worst_s) == (1, 3, 1, 1, 1, 2.0)
    # Other groups and rules never merge or split: an overlapping incident elsewhere is its own.
    apart = match([inc("lag", "warning", 10, 50)], [inc("lag", "warning", 10, 50), inc("stalled", "warning", 20, 30)])
    assert sorted(m.outcome for m in apart) == [Outcome.GAINED, Outcome.SAME]


def test_the_daemons_alerts_cut_by_the_range_end_take_their_severity_from_the_recorded_replay() -> None:
    """With --until mid-incident, the lake holds the firing row (a warning) and not the escalation: a candidate that
    changes nothing about the lag rule showed the daemon's cut incidents as pages gained (23 in 12 hours of the
    whatif bench). The replay of the recorded configuration reached what the daemon reached: its severity settles."""
    from lagwatch.pipeline.whatif import settle_open

    cut = inc("lag", "warning", 30, None)._replace(severity_final=False)
    other = inc("lag", "warning", 40, None, group="h")._replace(severity_final=False)
    done = inc("stopped", "warning", 5, 20)
    replay_of_recorded = [inc("lag", "critical", 30, None), inc("lag", "critical", 44, None, group="h")]
    assert totals("x", match([cut, done], replay_of_recorded[:1])).pages_gained == 1  # what it said before
    settled, n = settle_open([cut, other, done], replay_of_recorded)
    assert n == 1 and settled[0] == cut._replace(severity="critical", severity_final=True)
    assert settled[1:] == [other, done]  # not fired alike by the replay (44 s, not 40 s): left as recorded
    assert totals("x", match([*settled[:1], done], replay_of_recorded[:1])).pages_gained == 0


def test_a_clusters_candidates_are_split_in_as_many_groups_as_it_has_slots() -> None:
    """One cluster on 2 slots: two tasks, each over one copy of the rows (sorted once, each poll decoded once for
    its candidates). A copy per candidate sorted 5 copies of a week and ran out of the driver's heap."""
    from lagwatch.pipeline.backtest import plan_tasks

    groups, placed = plan_tasks({"a": 2016}, 5, 2)
    assert groups == [[0, 2, 4], [1, 3]] and sorted(placed.values()) == [0, 1]
    for candidates, slots in ((1, 2), (3, 1), (5, 1)):  # one candidate, or one slot: one task, every candidate
        assert plan_tasks({"a": 10}, candidates, slots) == (None, {("a", -1): 0})
    groups, placed = plan_tasks({"a": 10, "b": 10}, 5, 2)  # as many clusters as slots: a task per cluster
    assert groups is None and placed == {("a", -1): 0, ("b", -1): 1}
    groups, placed = plan_tasks({"a": 100, "b": 10}, 3, 4)
    assert groups == [[0, 2], [1]]
    assert sorted(g for group in groups for g in group) == [0, 1, 2]
    assert placed[("a", 0)] != placed[("a", 1)]  # the big cluster's two tasks on two slots
