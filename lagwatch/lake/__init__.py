"""EDGE: the lag history lake. Every poll's snapshot (losslessly, one row per group-partition), every alert
transition and the configuration in force, as Parquet under Hive partitions `cluster=<name>/date=<YYYY-MM-DD>`.

pyarrow is imported only when the lake is enabled (`lagwatch.lake.writer`); `lagwatch.lake.codec` (snapshots to
rows and back) uses only the standard library and the model, so Spark executors can import it next to the core.
"""

from lagwatch.lake.settings import LakeConfig

__all__ = ["LakeConfig"]
