"""`lagwatch pipeline compact`: one file per old partition, the same rows, safe next to the daemon and after a crash.

No Spark: the job merges with pyarrow (see lagwatch/pipeline/compact.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
import pyarrow.dataset as ds  # noqa: E402

from lagwatch.lake import LakeConfig, codec  # noqa: E402
from lagwatch.lake.writer import LakeWriter, open_filesystem  # noqa: E402
from lagwatch.pipeline import compact  # noqa: E402
from tests.synthetic import Pipeline  # noqa: E402
from tests.test_lake import T0, rich_snapshot  # noqa: E402

DAY = 86400.0
KEYS = {"snapshots": ["cluster", "date", "taken_at", "ordinal"], "alerts": ["cluster", "date", "at", "key"]}


def _writer(lake: Path) -> LakeWriter:
    return LakeWriter(LakeConfig(enabled=True, path=str(lake), format="parquet"))  # its file layout


def _age(lake: Path, hours: float = 2.0) -> None:
    """Every file written so far was last written `hours` ago."""
    then = time.time() - hours * 3600
    for f in lake.rglob("*.parquet"):
        os.utime(f, (then, then))


def build_lake(lake: Path, polls_per_day: int = 6) -> LakeWriter:
    """Two date partitions of snapshots, one file per poll (as a daemon with a short roll_seconds writes them)."""
    w = _writer(lake)
    p = Pipeline()
    w.record_config("c", {"lag": {}}, {"group_wait_s": 0}, 90.0, False, 30.0, p.book)
    for day in (0, 1):
        for i in range(polls_per_day):
            s = rich_snapshot(T0 + day * DAY + i * 30)
            w.record(s, p.step(s), p.book)
            assert w.flush()
    _age(lake)
    return w


def files(lake: Path, dataset: str = "snapshots") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in sorted((lake / dataset).rglob("*")):
        if f.is_file():
            out.setdefault(f.parent.name, []).append(f.name)
    return out


def rows(lake: Path, dataset: str = "snapshots") -> Any:
    table = ds.dataset(lake / dataset, format="parquet", partitioning="hive").to_table()
    return table.to_pandas().sort_values(KEYS[dataset]).reset_index(drop=True)


def run(lake: Path, *args: str, hours: float = 1.0) -> compact.CompactSummary:
    return compact.compact_lake(str(lake), *args, older_than_hours=hours, say=lambda _: None)


def test_one_file_per_old_partition_with_the_same_rows_and_schema(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    build_lake(lake)
    before = rows(lake)
    schema_before = ds.dataset(lake / "snapshots", format="parquet").schema
    assert [len(v) for v in files(lake).values()] == [6, 6]

    summary = run(lake)

    after_files = files(lake)
    assert sorted(after_files) == ["date=2026-09-21", "date=2026-09-22"]
    for names in after_files.values():
        assert len(names) == 1 and names[0].startswith("part-compact-")
    assert summary.partitions_compacted == 2 and (summary.files_before, summary.files_after) == (12, 2)
    assert summary.bytes_before > summary.bytes_after > 0
    pd.testing.assert_frame_equal(rows(lake), before)
    merged = next((lake / "snapshots").rglob("part-compact-*.parquet"))
    schema = pa.parquet.read_schema(merged)
    assert schema.equals(schema_before, check_metadata=False)
    assert schema.metadata[b"lagwatch.schema_version"] == str(codec.SCHEMA_VERSION).encode()
    assert set(rows(lake)["schema_version"]) == {codec.SCHEMA_VERSION}
    assert not list(lake.rglob(".tmp-*"))
    ((config_file,),) = files(lake, "config").values()  # one file: left as it is
    assert config_file.startswith("part-2")


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    build_lake(lake)
    run(lake)
    _age(lake)  # even once the merged files are old
    first = files(lake), rows(lake)
    for hours in (1.0, 0.0):
        summary = run(lake, hours=hours)
        assert summary.partitions_compacted == 0 and summary.partitions_recovered == 0
        assert files(lake) == first[0]
        pd.testing.assert_frame_equal(rows(lake), first[1])


def test_files_the_daemon_writes_during_or_after_listing_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    w = build_lake(lake)
    p = Pipeline()
    one_poll = len(rows(lake)) // 12
    written_during: set[str] = set()
    real_merge = compact._merge

    def merge_while_the_daemon_writes(fs: Any, directory: str, inputs: Any, name: str) -> int:
        listed = {f.name for f in Path(directory).iterdir()}
        s = rich_snapshot(T0 + (DAY if directory.endswith("09-22") else 0) + 4000)
        w.record(s, p.step(s), p.book)
        assert w.flush()
        _age(lake, 5)  # it even looks old: it was not listed, so it is not merged
        written_during.update({f.name for f in Path(directory).iterdir()} - listed)
        return real_merge(fs, directory, inputs, name)

    monkeypatch.setattr(compact, "_merge", merge_while_the_daemon_writes)
    summary = run(lake)
    assert summary.partitions_compacted == 2 and summary.files_before == 12
    assert len(written_during) == 2
    for names in files(lake).values():
        assert len(names) == 2 and len(set(names) & written_during) == 1
        assert len([n for n in names if n.startswith("part-compact-")]) == 1
    assert len(rows(lake)) == 14 * one_poll


def test_a_young_file_is_not_merged(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    w = build_lake(lake)
    p = Pipeline()
    fresh = rich_snapshot(T0 + DAY + 3000)
    w.record(fresh, p.step(fresh), p.book)
    assert w.flush()
    (young,) = (max((lake / "snapshots").rglob("part-*.parquet"), key=lambda f: f.stat().st_mtime).name,)
    before = rows(lake)
    summary = run(lake)
    assert summary.files_before == 12
    assert young in files(lake)["date=2026-09-22"] and len(files(lake)["date=2026-09-22"]) == 2
    pd.testing.assert_frame_equal(rows(lake), before)


def crash_between_rename_and_delete(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compact that dies after renaming its merged file in and deleting two of its inputs."""
    real_delete = compact._delete_inputs

    def crash_halfway(fs: Any, inputs: Any) -> None:
        real_delete(fs, inputs[:2])  # a couple deleted, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(compact, "_delete_inputs", crash_halfway)
    with pytest.raises(KeyboardInterrupt):
        run(lake)
    monkeypatch.setattr(compact, "_delete_inputs", real_delete)


@pytest.mark.parametrize("hours", [1.0, 0.0])
def test_a_rerun_after_a_crash_between_rename_and_delete_counts_no_row_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hours: float
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake)
    before = rows(lake)
    crash_between_rename_and_delete(lake, monkeypatch)
    day1 = files(lake)["date=2026-09-21"]
    assert len(day1) == 1 + 6 - 2 and any(n.startswith("part-compact-") for n in day1)
    if hours == 0.0:
        _age(lake)  # the merged file now looks like an old input too: its footer still says what it holds
    summary = run(lake, hours=hours)
    assert summary.partitions_recovered >= 1
    assert [len(v) for v in files(lake).values()] == [1, 1]
    pd.testing.assert_frame_equal(rows(lake), before)
    assert not list(lake.rglob(".tmp-*"))


@pytest.mark.parametrize("footer", [True, False])
def test_the_same_listing_again_after_a_crash_only_deletes_the_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, footer: bool
) -> None:
    """The merged file's footer lists its inputs; and its name comes from their names: if it exists, this merge
    already happened (footer=False: only the name tells)."""
    lake = tmp_path / "lake"
    build_lake(lake)
    before = rows(lake)
    directory = lake / "snapshots" / "cluster=c" / "date=2026-09-21"
    inputs = sorted(directory.iterdir())
    fs_, _ = open_filesystem(str(lake))
    name = compact.merged_name([f.name for f in inputs])
    compact._merge(fs_, str(directory), [compact.InputFile(str(f), f.name, f.stat().st_size) for f in inputs], name)
    assert (directory / name).exists() and len(list(directory.iterdir())) == 7
    if not footer:
        monkeypatch.setattr(compact, "_recover", lambda fs, listing: 0)
    summary = run(lake)
    assert summary.partitions_compacted == (1 if footer else 2) and summary.partitions_recovered == 1
    assert sorted(p.name for p in directory.iterdir()) == [name]
    pd.testing.assert_frame_equal(rows(lake), before)


def test_a_failed_merge_leaves_the_inputs_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = tmp_path / "lake"
    build_lake(lake)
    before_files, before = files(lake), rows(lake)
    import pyarrow.parquet as pq

    class Broken(pq.ParquetWriter):  # type: ignore[misc]
        def write_table(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("No space left on device")

    monkeypatch.setattr(pq, "ParquetWriter", Broken)
    with pytest.raises(OSError):
        run(lake)
    assert files(lake) == before_files and not list(lake.rglob(".tmp-*"))
    pd.testing.assert_frame_equal(rows(lake), before)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lagwatch", "pipeline", "compact", *args], capture_output=True, text=True, timeout=60
    )


def test_the_command_prints_a_summary(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, polls_per_day=3)
    done = _cli("--lake", str(lake), "--dataset", "snapshots")
    assert done.returncode == 0, done.stderr
    assert "compacted 2 of 2 partition(s): files 6 -> 2" in done.stdout
    assert "snapshots/cluster=c/date=2026-09-21: 3 files" in done.stderr
    again = subprocess.run(
        [sys.executable, "-m", "lagwatch.pipeline.compact", "--lake", str(lake), "--older-than-hours", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and "compacted 0 of 3 partition(s)" in again.stdout, again.stderr


def test_the_lake_can_come_from_the_daemons_config(tmp_path: Path) -> None:
    """As the Helm chart's CronJob runs it: `--config` with the daemon's configuration, whose lake.path it uses."""
    lake = tmp_path / "lake"
    build_lake(lake, polls_per_day=3)
    config = tmp_path / "lagwatch.yaml"
    config.write_text(f"lake: {{enabled: true, path: '{lake}'}}\n")
    done = _cli("--config", str(config), "--dataset", "snapshots")
    assert done.returncode == 0 and "compacted 2 of 2 partition(s)" in done.stdout, done.stderr
    neither = _cli("--dataset", "snapshots")
    assert neither.returncode == 2 and "--lake or --config" in neither.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lake", "{tmp}/nowhere"], "no such directory"),
        (["--lake", "{tmp}"], "no lake there"),
        (["--lake", "{lake}", "--dataset", "lags"], "--dataset: no dataset 'lags'"),
        (["--lake", "{lake}", "--older-than-hours", "soon"], "--older-than-hours: not a number"),
        (["--lake", "{lake}", "--older-than-hours", "-1"], "--older-than-hours: must be 0 or more"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "lake" / "alerts").mkdir(parents=True)
    done = _cli(*(a.format(tmp=tmp_path, lake=tmp_path / "lake") for a in args))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_a_corrupt_file_leaves_its_partition_and_the_others_are_compacted(tmp_path: Path, damage: str) -> None:
    """A truncated or foreign file stopped the whole run with a traceback: the other partitions (and datasets) were
    never compacted, at every run of the cron job. Its partition is left as it is, one line says which, the others
    are compacted, and the exit code says something needs a look."""
    lake = tmp_path / "lake"
    build_lake(lake, polls_per_day=3)
    day0 = sorted((lake / "snapshots" / "cluster=c").iterdir())[0]
    victim = sorted(day0.glob("part-*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:40] if damage == "truncated" else b"not a parquet file at all")
    _age(lake)
    done = _cli("--lake", str(lake), "--dataset", "snapshots")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{day0.name}: left as it is, a file cannot be read" in done.stderr
    assert "compacted 1 of 2 partition(s)" in done.stdout and "1 partition(s) left as they are" in done.stdout
    assert len(list(day0.glob("part-*.parquet"))) == 3  # untouched


@pytest.mark.spark
def test_the_spark_jobs_read_no_row_twice_after_a_crashed_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    """The inputs a crashed compact left beside their merged file were read with it by `report` and `backtest`:
    every lag of those days doubled in the report (and the backtest failed). The readers skip them, as compact's
    next run deletes them."""
    from lagwatch.pipeline.lake_read import read_snapshots

    lake = tmp_path / "lake"
    build_lake(lake)
    expected = len(rows(lake))
    assert compact.readable_files(str(lake), "snapshots") is None  # nothing to skip: the directory is read
    crash_between_rename_and_delete(lake, monkeypatch)
    kept = compact.readable_files(str(lake), "snapshots")
    assert kept is not None and len(kept) == 1 + 6  # day 1: the merged file alone; day 2 (not merged yet) whole
    assert read_snapshots(spark, str(lake)).count() == expected
    assert read_snapshots(spark, str(lake), since=T0 + DAY).count() == expected // 2


def test_a_delta_lake_is_optimized_and_vacuumed_with_every_row_kept(tmp_path: Path) -> None:
    """On Delta tables compact is OPTIMIZE (each old partition's small files into one) and VACUUM, by delta-rs;
    the table's rows are the same, and a second run changes nothing."""
    from deltalake import DeltaTable

    lake = tmp_path / "lake"
    w = LakeWriter(LakeConfig(enabled=True, path=str(lake)))  # a new lake: Delta
    p = Pipeline()
    for day in (0, 1):
        for i in range(4):
            s = rich_snapshot(T0 + day * DAY + i * 30)
            w.record(s, p.step(s), p.book)
            assert w.flush()
    assert w.format == "delta"

    def current() -> tuple[Any, int]:
        table = DeltaTable(str(lake / "snapshots"))
        data = table.to_pyarrow_dataset().to_table().to_pandas()
        return data.sort_values(KEYS["snapshots"]).reset_index(drop=True), len(table.file_uris())

    before, files_before = current()
    assert files_before == 8
    summary = compact.compact_lake(str(lake), "snapshots", older_than_hours=0, say=lambda _: None)
    after, files_after = current()
    assert files_after == 2 and summary.partitions_compacted == 2 and summary.files_before == 8
    pd.testing.assert_frame_equal(after, before)
    again = compact.compact_lake(str(lake), "snapshots", older_than_hours=0, say=lambda _: None)
    assert again.partitions_compacted == 0 and current()[1] == 2
