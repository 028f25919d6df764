"""The lake on a real S3-compatible server (SeaweedFS, tests/s3_server.py): the daemon writes it with its keys
from the secrets directory, a store that hangs or dies never holds up a poll (rows buffered, counted, written once
it is back; past the cap the oldest dropped and counted), and no key reaches a log line or the metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402
from pyarrow.fs import FileSelector  # noqa: E402

from lagwatch.config import load_settings  # noqa: E402
from lagwatch.daemon import Daemon  # noqa: E402
from lagwatch.lake import codec  # noqa: E402
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, weed_binary  # noqa: E402
from tests.test_lake import T0, FakePoller, rich_snapshot  # noqa: E402


def read_s3(server: S3Server, prefix: str, dataset: str) -> Any:
    """The dataset as a reader sees it: a Delta table's current version, else the Parquet files."""
    from deltalake import DeltaTable

    path = f"{server.bucket}/{prefix}/{dataset}"
    if server.filesystem().get_file_info(f"{path}/_delta_log").type.name == "Directory":
        return DeltaTable(f"s3://{path}", storage_options=server.delta_options()).to_pyarrow_dataset().to_table()
    return ds.dataset(path, filesystem=server.filesystem(), format="parquet", partitioning="hive").to_table()


def daemon_on(server: S3Server, tmp_path: Path, prefix: str, **lake: Any) -> Daemon:
    """The daemon as the chart runs it: the lake's URL and endpoint in the file, its keys in the secrets dir."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "lake__s3__access_key_id").write_text(ACCESS_KEY)
    (secrets / "lake__s3__secret_access_key").write_text(SECRET_KEY)
    lake_settings = server.lake_settings(prefix)
    settings = load_settings(
        secrets_dir=secrets,
        rules={"stopped": {"window_s": 3}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
        state_dir=tmp_path / "state",
        http={"enabled": False},
        lake={**lake_settings, **lake, "s3": {**lake_settings["s3"], **lake.get("s3", {})}},  # type: ignore[dict-item]
    )
    clusters = {"c": load_settings(clusters={"c": {"bootstrap_servers": ["127.0.0.1:1"]}}).clusters["c"]}
    return Daemon(settings, clusters=clusters, notifiers={}, poller_factory=FakePoller)


def test_the_daemons_polls_come_back_equal_from_s3(s3_server: S3Server, tmp_path: Path) -> None:
    from lagwatch.lake import LakeConfig
    from lagwatch.lake.writer import LakeWriter
    from tests.synthetic import Pipeline

    config = LakeConfig.model_validate({**s3_server.lake_settings("equal"), "s3": {
        "endpoint": s3_server.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}})  # fmt: skip
    lake = LakeWriter(config)
    polls = [rich_snapshot(T0 + i) for i in range(3)]
    p = Pipeline()
    for s in polls:
        lake.record(s, p.step(s), p.book)
    assert lake.flush() and lake.stats.files_written == 1
    rows = read_s3(s3_server, "equal", "snapshots").to_pandas().to_dict("records")
    assert codec.snapshots_from_rows("c", rows) == polls
    listed = s3_server.filesystem().get_file_info(FileSelector(f"{s3_server.bucket}/equal", recursive=True))
    keys = [i.path for i in listed]
    assert not [k for k in keys if "/.tmp-" in k]  # a PUT is whole: no temporary name on S3


@pytest.fixture
def store(tmp_path: Path) -> Iterator[S3Server]:
    """A server of this test's own: it is frozen and killed."""
    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS not built (make test-deps builds it: deploy/tools/install-seaweedfs.sh)")
    server = S3Server(binary, tmp_path / "seaweedfs").start()
    yield server
    server.remove()


def test_a_hung_or_dead_store_never_holds_up_a_poll(
    store: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGSTOP (connections accepted, never answered) then SIGKILL (refused) mid-run: every poll stays fast, the
    rows wait in memory, counted, the oldest dropped past the cap and counted; once the store is back every kept
    row is written, once."""
    caplog.set_level(logging.INFO)
    daemon = daemon_on(store, tmp_path, "killed", roll_rows=1, roll_seconds=0.2, max_buffer_rows=60, retention_days=0,
                       s3={"connect_timeout_s": 1, "request_timeout_s": 1})  # fmt: skip
    lake = daemon.lake
    assert lake is not None
    lake.start()
    slowest = 0.0

    def poll(n: int = 1) -> None:
        nonlocal slowest
        for _ in range(n):
            started = time.monotonic()
            daemon.poll_cluster("c")
            slowest = max(slowest, time.monotonic() - started)

    def until(what: str, predicate: Any, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"{what}: {lake.stats}"
            poll()  # the daemon goes on polling meanwhile
            time.sleep(0.2)

    try:
        poll(3)
        until("first files", lambda: lake.stats.files_written >= 1 and lake.stats.buffered_rows == 0)
        store.freeze()
        until("a write timing out", lambda: lake.stats.write_failures >= 1)
        poll(20)  # 4 rows a poll, against a cap of 60
        assert lake.stats.buffered_rows <= 60 and lake.stats.dropped_rows > 0
        daemon.render_metrics()
        body = daemon.metrics_body()
        assert b"lagwatch_lake_write_failures_total" in body and b"lagwatch_lake_buffered_rows " in body
        assert b"lagwatch_lake_dropped_rows_total 0" not in body
        store.thaw()
        until("written after the thaw", lambda: lake.stats.buffered_rows == 0)
        failures = lake.stats.write_failures
        store.kill()
        until("a refused write", lambda: lake.stats.write_failures > failures)
        poll(3)
        store.start()
        until("written after the restart", lambda: lake.stats.buffered_rows == 0)
    finally:
        store.thaw()
        daemon.stop()
    assert slowest < 1.0, f"a poll took {slowest:.2f} s while the store hung"  # ~10 ms each here
    snapshots = read_s3(store, "killed", "snapshots").to_pandas()
    polls = snapshots[snapshots.row_kind == "poll"].taken_at.tolist()
    assert len(polls) == len(set(polls))  # none doubled (a retry after a timeout wrote them twice)
    alerts = read_s3(store, "killed", "alerts").to_pandas()
    stored = len(snapshots) + len(alerts) + len(read_s3(store, "killed", "config"))
    # Every row counted written is there; a row counted dropped may be too, when a write that timed out on the
    # client completed on the store after all (the retry, under the same name, then leaves it as it was).
    assert lake.stats.rows_written <= stored <= lake.stats.rows_written + lake.stats.dropped_rows
    assert list(alerts.transition) == ["firing"] and list(alerts.rule) == ["stopped"]  # kept whatever was dropped
    said = caplog.text
    assert "lake write failed; rows stay buffered" in said and "lake writes work again" in said
    assert SECRET_KEY not in said and ACCESS_KEY not in said
    assert SECRET_KEY.encode() not in daemon.metrics_body()


def test_stop_with_a_hung_store_ends_in_time_and_says_what_was_lost(store: S3Server, tmp_path: Path) -> None:
    daemon = daemon_on(store, tmp_path, "stopping", roll_rows=10**6, s3={"request_timeout_s": 1})
    assert daemon.lake is not None
    daemon.poll_cluster("c")
    store.freeze()
    try:
        started = time.monotonic()
        daemon.lake.stop(timeout=5)
        assert time.monotonic() - started < 15  # 7 s measured (connect 2 s, request 1 s), not pyarrow's 89 s
        assert daemon.lake.stats.buffered_rows > 0 and daemon.lake.stats.write_failures == 1
    finally:
        store.thaw()
