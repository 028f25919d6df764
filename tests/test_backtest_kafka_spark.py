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
    settings = load_settings(
        rules=FAST_RULES,
        alerts={"group_wait_s": 0, "group_interval_s": 1},
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
    recorder = Recorder()
    daemon = Daemon(settings, clusters={"test": cluster}, notifiers={"record": recorder}).start()
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
def test_the_streamed_replay_equals_the_replay_of_each_clusters_whole_range(tmp_path: Path, spark: Any) -> None:
    """Several clusters in one partition, or one task per cluster and candidate: the same rows as folding the
    step over each cluster's whole range in memory. A range where nothing fires gives no rows, not an error."""
    import pyarrow.dataset as ds

    from lagwatch.lake import LakeConfig
    from lagwatch.lake.writer import LakeWriter
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
    candidates = [load_candidate("recorded"), load_candidate(str(strict))]
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
        for partitions in ("1", "8"):  # both clusters in one task; one task per cluster and candidate
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
            out = run_backtest(str(tmp_path / "lake"), ["recorded", str(strict)], str(tmp_path / "out"), spark=spark)
            assert _rows_as_set(out.to_dict("records")) == _rows_as_set(expected)
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
