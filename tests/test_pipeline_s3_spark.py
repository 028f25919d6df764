"""The jobs on a Delta lake in a real S3-compatible server (SeaweedFS), each run as its own process: with the
daemon's file (the lake's URL and endpoint, the keys in the secrets directory) or with only --lake and the AWS
variables; Hadoop's s3a and Delta's connectors from LAGWATCH_SPARK_JARS. DuckDB reads the same tables. The report
with the daemon's file runs in tests/test_chart_pipeline_s3.py, as the chart's CronJob runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402
from pyarrow import fs  # noqa: E402

from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server  # noqa: E402
from tests.spark_jars import ensure_spark_jars  # noqa: E402
from tests.test_report_spark import POLLS, write_lake  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def s3_lake(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report tests' lake (26 h of the daemon's own writer), copied to s3://lake/pipeline."""
    local = tmp_path_factory.mktemp("s3lake") / "lake"
    write_lake(local)
    fs.copy_files(str(local), f"{s3_server.bucket}/pipeline", destination_filesystem=s3_server.filesystem())
    return "pipeline"


def job_env(tmp_path: Path, s3_server: S3Server, with_keys: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), LAGWATCH_SPARK_JARS=str(ensure_spark_jars()), PYSPARK_PYTHON=sys.executable)
    env["LAGWATCH_SPARK_LOG"] = str(tmp_path / "spark.log")
    if with_keys:
        env.update(s3_server.env())
    return env


def daemon_file(tmp_path: Path, s3_server: S3Server, prefix: str) -> tuple[Path, Path]:
    """The chart's ConfigMap and secrets directory, in small: clusters, a notifier, the lake; the keys as files."""
    config = tmp_path / "lagwatch.yaml"
    lake = {"enabled": True, "path": f"s3a://{s3_server.bucket}/{prefix}", "s3": {"endpoint": s3_server.endpoint}}
    config.write_text(yaml.safe_dump({"clusters": {"prod": {"bootstrap_servers": ["kafka:9092"]}},
                                      "notifiers": {"log": {"enabled": True}}, "lake": lake}))  # fmt: skip
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "lake__s3__access_key_id").write_text(ACCESS_KEY)
    (secrets / "lake__s3__secret_access_key").write_text(SECRET_KEY)
    return config, secrets


def lagwatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lagwatch", *args], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def test_backtest_with_only_the_lake_url_and_the_aws_variables(
    s3_server: S3Server, s3_lake: str, tmp_path: Path
) -> None:
    lake = f"s3a://{s3_server.bucket}/{s3_lake}"
    output = f"s3a://{s3_server.bucket}/backtest-out"
    done = lagwatch("pipeline", "backtest", "--lake", lake, "--output", output, "--until", "2026-11-06T18:00:00Z",
                    env=job_env(tmp_path, s3_server, with_keys=True))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the daemon raised" in done.stdout, done.stdout  # set beside what the daemon raised
    alerts = ds.dataset(f"{s3_server.bucket}/backtest-out", filesystem=s3_server.filesystem(), format="parquet",
                        partitioning="hive").to_table().to_pandas()  # fmt: skip
    assert (alerts.kind == "alert").sum() > 0


def delta_table(s3_server: S3Server, path: str) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(f"s3://{s3_server.bucket}/{path}", storage_options=s3_server.delta_options())


def test_compact_on_s3_keeps_every_row(s3_server: S3Server, s3_lake: str, tmp_path: Path) -> None:
    """OPTIMIZE and VACUUM by delta-rs on the store (no Spark, no Java), the daemon's own file."""
    config, secrets = daemon_file(tmp_path, s3_server, s3_lake)
    before = delta_table(s3_server, f"{s3_lake}/snapshots")
    rows, files = before.to_pyarrow_dataset().count_rows(), len(before.file_uris())
    env = {**job_env(tmp_path, s3_server, with_keys=False), "LAGWATCH_SECRETS_DIR": str(secrets)}
    done = lagwatch("pipeline", "compact", "--config", str(config), "--older-than-hours", "0", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    after = delta_table(s3_server, f"{s3_lake}/snapshots")
    assert after.to_pyarrow_dataset().count_rows() == rows and len(after.file_uris()) == 2 < files  # a file a day


def test_duckdb_reads_the_same_lake_on_s3(s3_server: S3Server, s3_lake: str) -> None:
    """A second engine on the same tables, as a data engineer would point it at the bucket: DuckDB's delta_scan
    (its extensions from PyPI), the same rows as delta-rs reads."""
    duckdb = pytest.importorskip("duckdb")
    import duckdb_ext

    extensions = next(Path(next(iter(duckdb_ext.__path__))).glob("extensions/*/*"))
    con = duckdb.connect()
    for name in ("httpfs", "delta"):
        con.execute(f"LOAD '{extensions}/{name}.duckdb_extension'")
    endpoint = s3_server.endpoint.removeprefix("http://")
    con.execute(f"CREATE SECRET lake (TYPE s3, KEY_ID '{ACCESS_KEY}', SECRET '{SECRET_KEY}', ENDPOINT '{endpoint}', "
                "URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')")  # fmt: skip
    uri = f"s3://{s3_server.bucket}/{s3_lake}/snapshots"
    ((polls, groups),) = con.execute(
        f"SELECT count(*) FILTER (WHERE row_kind = 'poll'), count(DISTINCT \"group\") FROM delta_scan('{uri}')"
    ).fetchall()
    assert polls == POLLS and groups == 3
    assert con.execute(f"SELECT count(*) FROM delta_scan('{uri}')").fetchone() == (
        delta_table(s3_server, f"{s3_lake}/snapshots").to_pyarrow_dataset().count_rows(),
    )
