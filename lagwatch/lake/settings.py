"""The lake's settings (`lake:` at the top level of the configuration)."""

from __future__ import annotations

import importlib.util
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from lagwatch.errors import SPARK_EXTRA


def lake_installed() -> bool:
    """Whether the lake can be written here: pyarrow, of the spark extra (the daemon itself never needs it)."""
    return importlib.util.find_spec("pyarrow") is not None


def is_s3(path: str) -> bool:
    return path.startswith(("s3://", "s3a://"))


class S3Access(BaseModel):
    """How the lake's S3-compatible store is reached: by the daemon (pyarrow), `compact` (pyarrow) and the Spark
    jobs (Hadoop's s3a), all from these same settings. The keys are secrets: from the secrets directory
    (`lake__s3__access_key_id`, `lake__s3__secret_access_key`) or LAGWATCH_LAKE__S3__..., never the file. Without
    them, the AWS SDKs' own chain (AWS_ACCESS_KEY_ID..., a web identity such as EKS's IRSA, an instance role)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # An S3-compatible server's URL (http://seaweedfs.storage:8333); unset: AWS S3 itself. Paths are path-style
    # on such a server (what they all take), virtual-hosted on AWS.
    endpoint: str | None = None
    region: str = Field(default="us-east-1", min_length=1)
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    # Every request is bounded: a store that stops answering fails a write within about 2.5 x request_timeout_s
    # (measured), and the rows stay buffered. The SDKs' defaults waited 89 s (pyarrow) and 181 s (deltalake).
    connect_timeout_s: float = Field(default=2.0, gt=0, le=60)
    request_timeout_s: float = Field(default=5.0, gt=0, le=300)

    @field_validator("endpoint")
    @classmethod
    def _url(cls, endpoint: str | None) -> str | None:
        if endpoint is None:
            return None
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            raise ValueError("must be an http:// or https:// URL of the server, without a path")
        return endpoint.rstrip("/")

    @model_validator(mode="after")
    def _both_keys(self) -> S3Access:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together (or neither: the AWS SDK's chain)")
        return self


class LakeConfig(BaseModel):
    """Where the daemon records every poll, alert transition and the configuration in force (Parquet, Hive
    partitions by cluster and date). A local path, or a URI pyarrow opens (`s3://bucket/prefix`, `gs://...`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = False
    path: str = Field(default="lake", min_length=1)
    # A file is written (rolled) when this many rows are buffered, or `roll_seconds` after the oldest buffered row.
    roll_rows: int = Field(default=500_000, ge=1)
    roll_seconds: float = Field(default=300.0, gt=0, le=86400)
    # Date partitions older than this are deleted (checked hourly); 0 keeps everything.
    retention_days: int = Field(default=30, ge=0)
    # While the target refuses writes, rows stay buffered up to this many; past it the oldest polls are dropped
    # (counted), so memory stays bounded.
    max_buffer_rows: int = Field(default=2_000_000, ge=1)
    # delta: Delta Lake tables (appended by delta-rs, read by Spark with delta-spark, DuckDB, Trino...); parquet:
    # Hive-partitioned Parquet files (lakes before Delta); auto: what the lake already is, Delta for a new one.
    format: Literal["auto", "delta", "parquet"] = "auto"
    s3: S3Access = S3Access()

    @field_validator("enabled")
    @classmethod
    def _writable(cls, enabled: bool) -> bool:
        if enabled and not lake_installed():  # the first poll ended in a traceback: No module named 'pyarrow'
            raise ValueError(f"the lake needs pyarrow, of {SPARK_EXTRA}; or set it false")
        return enabled
