"""The daemon on the real broker records a lake; the backtest replays it through the same pipeline step and
reaches the same alert transitions; a stricter config raises more. Bad input: one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.live import Recorder, commit
from tests.test_daemon_kafka import FAST_RULES, LOOPBACK

pa = pytest.importorskip("pyarrow")


def events_of_alert_rows(rows: Any) -> list[tuple[str, str, str | None, str]]:
    """Alert rows (start, end) as the ordered transitions (firing / resolved, rule, group, severity)."""
    events = []
    for r in rows:
        events.append((r["fired_at"], 0, "firing", r["rule"], r["group"], r["severity"]))
        if r["resolved_at"] == r["resolved_at"] and r["resolved_at"] is not None:  # not NaN / None
            events.append((r["resolved_at"], 1, "resolved", r["rule"], r["group"], r["severity"]))
    return [e[2:] for e in sorted(events)]


@pytest.mark.kafka
@pytest.mark.spark
def test_backtest_replays_the_daemons_lake_to_the_same_alerts(bootstrap: str, tmp_path: Path, spark: Any) -> None:
    import pyarrow.dataset as ds

    from lagwatch.pipeline.backtest import BacktestError, run_backtest

    prefix = unique("lake")
    topic, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30}, {0: 10})
    recorder = Recorder()
    daemon = _recording_daemon(
        bootstrap, prefix, tmp_path, FAST_RULES, {"group_wait_s": 0, "group_interval_s": 1}, recorder
    )
    try:
        wait_for(lambda: recorder.kinds(group), timeout=20, what="the stopped group's alert")
        # The group comes back and catches up: its alert resolves.
        c = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
        commit(c, topic, 30)
        c.close()
        wait_for(lambda: len(recorder.kinds(group)) >= 2, timeout=15, what="the resolved notification")
        time.sleep(1.5)
    finally:
        daemon.stop()
    assert recorder.kinds(group) == [("firing", ("stopped",)), ("resolved", ())]

    lake = tmp_path / "lake"
    recorded = ds.dataset(lake / "alerts", format="parquet", partitioning="hive").to_table().to_pylist()
    recorded.sort(key=lambda r: r["at"])
    daemon_events = [(r["transition"], r["rule"], r["group"], r["severity"]) for r in recorded]
    assert daemon_events == [("firing", "stopped", group, "critical"), ("resolved", "stopped", group, "critical")]
    # Exact clocks were on (the default): the group's commits read from __consumer_offsets are in the lake, and the
    # replay below feeds them to its step as the daemon did.
    kinds = ds.dataset(lake / "snapshots", format="parquet", partitioning="hive").to_table().to_pandas()
    commits = kinds[(kinds.row_kind == "record") & (kinds.group == group)]
    assert len(commits) >= 2 and set(commits.committed) >= {10, 30}

    strict = tmp_path / "strict.yaml"
    strict.write_text(
        "rules:\n"
        + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in FAST_RULES.items() if k != "lag")
        + "  lag: {warning: {offsets: 5, seconds: null}, critical: {offsets: 1000000000}, for_s: 0}\n"
        "alerts: {group_wait_s: 0, group_interval_s: 1}\n"
    )
    out = run_backtest(str(lake), ["recorded", str(strict)], str(tmp_path / "out"), spark=spark)
    alerts = out[out["kind"] == "alert"]
    replayed = events_of_alert_rows(alerts[alerts["config"] == "recorded"].to_dict("records"))
    assert replayed == daemon_events
    stricter = alerts[alerts["config"] == "strict"]
    assert set(stricter["rule"]) == {"stopped", "lag"} and len(stricter) > len(alerts[alerts["config"] == "recorded"])
    pages = out[(out["kind"] == "notification") & (out["notification_kind"] == "firing")]
    assert list(pages[pages["config"] == "recorded"]["group"]) == [group]
    assert (alerts["condition_to_alert_s"] >= 0).all()

    with pytest.raises(BacktestError, match="no snapshots"):
        run_backtest(str(lake), [], str(tmp_path / "out2"), since=0.0, until=1000.0, spark=spark)


def backtest_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lagwatch.pipeline.backtest", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lake", "/nonexistent/lake"], "no lake there"),
        (["--config", "/nonexistent.yaml"], "no such file"),
        (["--config", "BAD"], "no such file"),
        (["--since", "yesterday"], "not an ISO time"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = backtest_cli(*args)
    assert result.returncode == 2 and message in result.stderr
    # argparse prints its usage first; the error itself is one line, the last, and there is no traceback.
    assert "Traceback" not in result.stderr and message in result.stderr.strip().splitlines()[-1]


def test_an_invalid_candidate_config_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  stopped: {window_s: -4}\n")
    result = backtest_cli("--config", str(bad), "--lake", str(tmp_path))
    assert result.returncode == 2 and "rules.stopped.window_s" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _rows_as_set(rows: Any) -> list[tuple[Any, ...]]:
    """Rows in a comparable form: every output column, pandas' NaN as None, numbers as floats (pandas' ints)."""
    from lagwatch.pipeline.backtest import OUTPUT_COLUMNS

    def clean(v: Any) -> Any:
        if v is None or v != v:
            return None
        return float(v) if isinstance(v, int | float) else v

    return sorted((tuple(clean(r.get(k)) for k in OUTPUT_COLUMNS) for r in rows), key=repr)


@pytest.mark.spark
def test_the_streamed_replay_equals_the_replay_of_each_clusters_whole_range(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several clusters in one partition, a cluster's candidates split in groups (each task replays its group in
    one pass), or one task per cluster and candidate: the same rows as folding the step over each cluster's whole
    range in memory, and the progress shown counts every poll of every task. A range where nothing fires gives no
    rows, not an error."""
    import pyarrow.dataset as ds

    from lagwatch.lake import LakeConfig
    from lagwatch.lake.writer import LakeWriter
    from lagwatch.pipeline import backtest as backtest_module
    from lagwatch.pipeline.backtest import ClusterParams, load_candidate, replay, run_backtest
    from tests.synthetic import TP, Pipeline, group, snapshot

    t0 = 1_790_000_000.0
    lake = LakeWriter(LakeConfig(enabled=True, path=str(tmp_path / "lake")), clock=lambda: t0 - 1)
    for cluster in ("east", "west"):
        p = Pipeline()
        lake.record_config(cluster, FAST_RULES, {"group_wait_s": 0, "group_interval_s": 1}, 90.0, False, 5.0, p.book)
        for i in range(60):  # the group stops at poll 10 and comes back at poll 40; the rows roll into many files
            stopped = 10 <= i < 40
            committed = 10 * i if i < 10 else (100 if stopped else 10 * i)
            snap = snapshot(
                t0 + 5 * i,
                [group("g", {TP: committed}, state="Empty" if stopped else "Stable", members=0 if stopped else 1)],
                {TP: 10 * i + (5 if cluster == "west" else 0)},
            )
            snap = dataclasses.replace(snap, cluster=cluster)
            lake.record_poll(snap, p.step(snap))
            if i % 7 == 0:
                assert lake.flush()
    assert lake.flush()
    strict = tmp_path / "strict.yaml"
    strict.write_text("rules:\n  lag: {warning: {offsets: 5}, for_s: 0}\nalerts: {group_wait_s: 0}\n")
    lax = tmp_path / "lax.yaml"
    lax.write_text("rules:\n  lag: {warning: {offsets: 40}, for_s: 0}\n")
    candidates = [load_candidate("recorded"), load_candidate(str(strict)), load_candidate(str(lax))]
    expected = []
    for cluster in ("east", "west"):
        rows = (
            ds.dataset(tmp_path / "lake" / "snapshots" / f"cluster={cluster}", format="parquet").to_table().to_pylist()
        )
        params = ClusterParams(90.0, False, FAST_RULES, {"group_wait_s": 0, "group_interval_s": 1})
        expected += replay(cluster, rows, candidates, params)
    assert {r["rule"] for r in expected if r["kind"] == "alert"} >= {"stopped", "lag"}
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        # Both clusters in one task; per cluster, candidates 0 and 2 in one task and 1 in another; one task per
        # cluster and candidate.
        for partitions in ("1", "4", "8"):
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
            monkeypatch.setattr(backtest_module, "PROGRESS_SHOW_S", 0.05 if partitions == "4" else 30.0)
            capsys.readouterr()
            out = run_backtest(
                str(tmp_path / "lake"), ["recorded", str(strict), str(lax)], str(tmp_path / "out"), spark=spark
            )
            assert _rows_as_set(out.to_dict("records")) == _rows_as_set(expected)
            if partitions == "4":  # 2 clusters x 60 polls, each replayed by 2 tasks
                assert "replayed 240 of 240 polls (100%)" in capsys.readouterr().err
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    quiet = run_backtest(str(tmp_path / "lake"), [], str(tmp_path / "out"), until=t0 + 20, spark=spark)
    assert len(quiet) == 0


@pytest.mark.parametrize("where", ["the lake", "above the lake", "inside the lake", "beside other files"])
def test_an_output_that_would_replace_the_lake_or_other_files_is_refused(where: str, tmp_path: Path) -> None:
    """Spark replaces the output directory whole: `--output` at or above the lake deleted the lake (and the files
    beside it), and the job exited 0. Refused before Spark starts, with one line; the lake is untouched."""
    lake = tmp_path / "data" / "lake"
    (lake / "snapshots" / "cluster=c").mkdir(parents=True)
    (lake / "snapshots" / "cluster=c" / "part-0.parquet").write_bytes(b"PAR1")
    (tmp_path / "data" / "notes.txt").write_text("mine")
    output = {
        "the lake": lake,
        "above the lake": tmp_path / "data",
        "inside the lake": lake / "out",
        "beside other files": tmp_path / "data",
    }[where]
    if where == "beside other files":
        lake = tmp_path / "elsewhere" / "lake"
        (lake / "snapshots").mkdir(parents=True)
    result = backtest_cli("--lake", str(lake), "--output", str(output))
    assert result.returncode == 2, result.stderr
    assert "--output" in result.stderr.strip().splitlines()[-1] and "Traceback" not in result.stderr
    assert (tmp_path / "data" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "data" / "lake" / "snapshots" / "cluster=c" / "part-0.parquet").is_file()


class LagDriver:
    """A live member of group `group` on one partition of `topic` that keeps committing (so neither `stopped` nor
    `stalled` sees it) exactly `lag` records behind a steady producer: the lag rule alone judges it."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        import threading

        from kafka import KafkaProducer

        self.lag = 0
        self.produced = 0
        self.topic = topic
        self.stop_event = threading.Event()
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.consumer = kafka_scenario.subscribed_consumer(bootstrap, group, [topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(0.25):
            for _ in range(3):
                self.producer.send(self.topic, b"x", partition=0)
            self.producer.flush()
            self.produced += 3
            kafka_scenario.commit(self.consumer, {TopicPartition(self.topic, 0): max(0, self.produced - self.lag)})

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        self.consumer.close()
        self.producer.close()


# Lag alerts at 20 and 100 records behind, at once; `stopped` after 4 s; the rest as the daemon tests have them.
RECORDED_RULES = {
    **FAST_RULES,
    "lag": {"warning": {"offsets": 20, "seconds": None}, "critical": {"offsets": 100, "seconds": None}, "for_s": 0},
}


@pytest.mark.kafka
@pytest.mark.spark
def test_a_candidate_is_an_overlay_and_is_set_beside_what_the_daemon_raised(
    bootstrap: str, tmp_path: Path, spark: Any
) -> None:
    """A daemon on the real broker raises lag alerts (a warning, then an incident that reaches critical: a page) and
    a `stopped` page. Replayed: the recorded configuration equals what the daemon raised; a candidate holding only
    `rules: lag:` with thresholds ten times higher keeps the recorded `stopped` rule (it reset every other rule to
    the defaults: no `stopped` alert within a 300 s window) and shows exactly the lag alerts it removes and the
    later fire time, every other rule unchanged; one identical to the recorded configuration shows no difference."""
    import pyarrow.dataset as ds

    from lagwatch.pipeline.backtest import RuleComparison, backtest

    prefix = unique("whatif")
    _, stopped = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30}, {0: 25})  # lag 5: `stopped`, never `lag`
    lag_topic, lag_group = f"{prefix}-lt", f"{prefix}-lg"
    kafka_scenario.create_topic(bootstrap, lag_topic, 1)
    alerts_config = {"group_wait_s": 0, "group_interval_s": 1}
    recorder = Recorder()
    driver = LagDriver(bootstrap, lag_topic, lag_group)
    daemon = _recording_daemon(bootstrap, prefix, tmp_path, RECORDED_RULES, alerts_config, recorder)
    try:
        wait_for(lambda: recorder.kinds(stopped), timeout=20, what="the stopped group's alert")
        # Lag 50 (a warning, under the candidate's 200), back to 0; then 50, 150 (critical), 500 (the candidate's
        # warning, not its critical at 1,000), back to 0.
        for lag, seconds in ((50, 5), (0, 4), (50, 4), (150, 4), (500, 5), (0, 4)):
            driver.lag = lag
            time.sleep(seconds)
        c = kafka_scenario.assigned_consumer(bootstrap, stopped, [TopicPartition(f"{prefix}-t", 0)])
        commit(c, f"{prefix}-t", 30)
        c.close()
        wait_for(lambda: len(recorder.kinds(stopped)) >= 2, timeout=15, what="the stopped group's resolution")
        time.sleep(1.5)
    finally:
        daemon.stop()
        driver.stop()
    lake = tmp_path / "lake"
    transitions = ds.dataset(lake / "alerts", format="parquet", partitioning="hive").to_table().to_pylist()
    fired = sorted((r["fired_at"], r["rule"], r["group"]) for r in transitions if r["transition"] == "firing")
    lag_fired = [t for t, rule, g in fired if rule == "lag" and g == lag_group]
    assert len(lag_fired) == 2, fired
    assert ("stopped", stopped) in {(rule, g) for _, rule, g in fired}

    tenfold = tmp_path / "lag10x.yaml"  # only `rules: lag:`, the thresholds ten times higher
    tenfold.write_text("rules:\n  lag: {warning: {offsets: 200}, critical: {offsets: 1000}}\n")
    same = tmp_path / "same.yaml"
    same.write_text(json.dumps({"rules": RECORDED_RULES, "alerts": alerts_config}))
    result = backtest(str(lake), ["recorded", str(tenfold), str(same)], str(tmp_path / "out"), spark=spark)
    by_config = {c.config: c for c in result.comparisons}

    # The replay of the recorded configuration is what the daemon raised, incident for incident.
    recorded = by_config["recorded"]
    assert recorded.differences == [] and all(m.outcome == "same" for m in recorded.matches)
    assert recorded.totals.alerts_recorded == recorded.totals.alerts_replayed == len(fired)

    # The tenfold lag thresholds: the first lag incident (50 behind) is lost; the second fires later (at 500
    # behind, not 50) and no longer reaches critical (a page lost); every other rule's incidents are the same.
    tenfold_cmp = by_config["lag10x"]
    lag_matches = sorted(
        (m for m in tenfold_cmp.matches if (m.recorded or m.replayed).rule == "lag"),  # type: ignore[union-attr]
        key=lambda m: (m.recorded or m.replayed).fired_at,  # type: ignore[union-attr]
    )
    assert [m.outcome for m in lag_matches] == ["lost", "later"]
    assert [m.recorded.fired_at for m in lag_matches if m.recorded] == lag_fired
    first_lost, later = lag_matches
    assert first_lost.recorded is not None and first_lost.recorded.severity == "warning"
    assert later.recorded is not None and later.replayed is not None
    assert later.recorded.severity == "critical" and later.replayed.severity == "warning"
    assert 6 <= (later.shift_s or 0) <= 12  # 50 behind for 4 s, 150 behind for 4 s, then 500
    others = [m for m in tenfold_cmp.matches if (m.recorded or m.replayed).rule != "lag"]  # type: ignore[union-attr]
    assert others and all(m.outcome == "same" for m in others)
    assert any(m.recorded and m.recorded.rule == "stopped" and m.recorded.group == stopped for m in others)
    rows = {(r.rule, r.severity): r for r in tenfold_cmp.rules}
    assert rows["lag", "warning"] == RuleComparison(
        "lag", "warning", 1, 1, gained=0, lost=1, other_severity=0, pages_gained=0, pages_lost=0,
        earlier=0, later=0, earlier_median_s=None, earlier_worst_s=None, later_median_s=None, later_worst_s=None,
    )  # fmt: skip
    assert rows["lag", "critical"][2:10] == (1, 0, 0, 0, 1, 0, 1, 0)  # recorded 1, replayed 0, changed, page lost
    assert rows["lag", "critical"].later == 1 and rows["lag", "critical"].later_worst_s == later.shift_s
    assert not any(r.differs() for r in tenfold_cmp.rules if r.rule != "lag")
    assert tenfold_cmp.totals.pages_lost == 1 and tenfold_cmp.totals.pages_gained == 0
    assert any(
        "candidate lag10x: overlay on the recorded configuration: rules.lag.warning.offsets 20 -> 200; "
        "rules.lag.critical.offsets 100 -> 1000" in line
        for line in result.overlays
    )

    # A candidate identical to the recorded configuration: no difference at all.
    same_cmp = by_config["same"]
    assert all(m.outcome == "same" for m in same_cmp.matches) and not any(r.differs() for r in same_cmp.rules)
    assert same_cmp.rules == recorded.rules
    assert any(
        "candidate same: overlay on the recorded configuration: changes nothing recorded" in x for x in result.overlays
    )

    # Parquet beside the replay: the comparison per config, rule and severity, and per incident; readers of the
    # replay's partitions skip them.
    table = ds.dataset(tmp_path / "out" / "_comparison", format="parquet").to_table().to_pylist()
    assert {
        (r["config"], r["rule"], r["severity"], r["lost"], r["pages_lost"]) for r in table if r["rule"] == "lag"
    } >= {
        ("lag10x", "lag", "warning", 1, 0),
        ("lag10x", "lag", "critical", 0, 1),
    }
    incidents = ds.dataset(tmp_path / "out" / "_incidents", format="parquet").to_table().to_pylist()
    assert sorted(r["outcome"] for r in incidents if r["config"] == "lag10x" and r["rule"] == "lag") == [
        "later",
        "lost",
    ]
    replay = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert set(replay.column("config").to_pylist()) == {"recorded", "lag10x", "same"}


def _recording_daemon(
    bootstrap: str, prefix: str, tmp_path: Path, rules: dict[str, Any], alerts: dict[str, Any], recorder: Recorder
) -> Daemon:
    """A daemon polling the groups `<prefix>-*` every second and writing its lake under `tmp_path`, started."""
    settings = load_settings(
        rules=rules,
        alerts=alerts,
        state_dir=tmp_path / "state",
        http=LOOPBACK,
        lake={"enabled": True, "path": str(tmp_path / "lake"), "roll_seconds": 2},
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        poll_interval_s=1,
        request_timeout_s=5,
        groups=NameFilter(include=[f"{prefix}-.*"]),
    )
    return Daemon(settings, clusters={"test": cluster}, notifiers={"record": recorder}).start()
