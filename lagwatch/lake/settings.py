"""The lake's settings (`lake:` at the top level of the configuration)."""

from __future__ import annotations

import importlib.util

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lagwatch.errors import SPARK_EXTRA


def lake_installed() -> bool:
    """Whether the lake can be written here: pyarrow, of the spark extra (the daemon itself never needs it)."""
    return importlib.util.find_spec("pyarrow") is not None


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

    @field_validator("enabled")
    @classmethod
    def _writable(cls, enabled: bool) -> bool:
        if enabled and not lake_installed():  # the first poll ended in a traceback: No module named 'pyarrow'
            raise ValueError(f"the lake needs pyarrow, of {SPARK_EXTRA}; or set it false")
        return enabled
