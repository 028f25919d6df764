"""The lake's settings (`lake:` at the top level of the configuration)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
