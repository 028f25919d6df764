"""`compact`: per Hive partition of the lake (dataset / cluster= / date=), merges the daemon's many small Parquet
files into one, safely while the daemon keeps writing.

The merge uses pyarrow, not Spark: a partition is one cluster's day (small enough to stream file by file through one
process), pyarrow keeps the daemon's exact Arrow schema (int16 columns, UTC microsecond timestamps and the
`lagwatch.schema_version` file metadata, which a Spark round trip would rewrite or drop), it reaches the same targets
as the daemon's writer (`pyarrow.fs`: local, s3://, gs://, hdfs://) with the same rename-into-place, and it needs
neither Java nor a JVM start. `--master` is accepted like the other jobs' but unused.

Per partition:
    1. list it once: only the files present now, named `part-*.parquet` (never `.tmp-*`), last written at least
       `--older-than-hours` ago, are inputs; files the daemon adds later are never touched;
    2. the merged file's name is derived from the inputs' names: `part-compact-<sha256[:16]>.parquet`, and its footer
       lists them (`lagwatch.compacted_from`);
    3. it is written as `.tmp-compact-<hash>.parquet` (hidden from readers; the daemon's retention deletes a stale
       one) and renamed into place once complete and its row count checked;
    4. only then are exactly the listed inputs deleted.
A crash leaves either the inputs alone, or the merged file plus (some of) its inputs. Before listing, every
`part-compact-*` file whose recorded inputs are still there has those inputs deleted (they are already in it); and
if the name for this listing already exists, the inputs are deleted without merging again. No row is counted twice.
A partition with fewer than two inputs is left as it is, so a second run changes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lagwatch.errors import SPARK_EXTRA, LagwatchError

DATASETS = ("snapshots", "alerts", "config")  # lagwatch.lake.writer.DATASETS (not imported: it needs pyarrow)
COMPACT_PREFIX = "part-compact-"
INPUTS_KEY = b"lagwatch.compacted_from"
ROW_GROUP_ROWS = 256_000  # rows buffered before a row group is written (the daemon's files are much smaller)


class CompactError(LagwatchError):
    exit_code = 2


class UnreadableFileError(Exception):
    """A file of the lake pyarrow cannot read (corrupt, truncated, not Parquet): its partition is left alone."""


@contextlib.contextmanager
def _reading(name: str) -> Iterator[None]:
    import pyarrow as pa

    try:
        yield
    except (OSError, pa.ArrowException) as e:
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise UnreadableFileError(f"{name}: {detail}") from None


@dataclass(frozen=True)
class InputFile:
    path: str
    name: str
    size: int


@dataclass
class CompactSummary:
    partitions_seen: int = 0
    partitions_compacted: int = 0
    partitions_recovered: int = 0  # a crashed run's merged file found with its inputs still there
    files_before: int = 0  # in the compacted partitions: the inputs...
    files_after: int = 0  # ...and the merged files
    bytes_before: int = 0
    bytes_after: int = 0
    inputs_deleted: int = 0  # duplicates of a crashed run's merged file, deleted
    partitions_unreadable: int = 0  # left as they are: a file pyarrow cannot read (corrupt, truncated)
    seconds: float = 0.0
    compacted: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"compacted {self.partitions_compacted} of {self.partitions_seen} partition(s): "
            f"files {self.files_before} -> {self.files_after}, bytes {self.bytes_before} -> {self.bytes_after}"
            + (
                f"; recovered {self.partitions_recovered} partition(s) from an earlier run "
                f"({self.inputs_deleted} already-merged input(s) deleted)"
                if self.partitions_recovered
                else ""
            )
            + (
                f"; {self.partitions_unreadable} partition(s) left as they are, with a file that cannot be read"
                if self.partitions_unreadable
                else ""
            )
            + f"; {self.seconds:.1f} s"
        )


def _say(message: str) -> None:
    print(f"compact: {message}", file=sys.stderr, flush=True)


def merged_name(inputs: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join(sorted(inputs)).encode()).hexdigest()[:16]
    return f"{COMPACT_PREFIX}{digest}.parquet"


def _datasets(dataset: str) -> tuple[str, ...]:
    if dataset == "all":
        return DATASETS
    if dataset not in DATASETS:
        raise CompactError(f"--dataset: no dataset {dataset!r} (one of {', '.join(DATASETS)}, all)")
    return (dataset,)


def _open_lake(lake: str, datasets: Sequence[str]) -> tuple[Any, str]:
    try:
        from pyarrow import fs
    except ImportError:
        raise CompactError(f"compact needs pyarrow, of {SPARK_EXTRA}") from None
    from lagwatch.lake.writer import open_filesystem

    try:
        filesystem, root = open_filesystem(lake)
        infos = filesystem.get_file_info([root, *(f"{root}/{d}" for d in datasets)])
    except Exception as e:
        raise CompactError(f"--lake {lake}: cannot open it: {str(e).splitlines()[0] if str(e) else e!r}") from None
    if infos[0].type != fs.FileType.Directory:
        raise CompactError(f"--lake {lake}: no such directory")
    if not any(info.type == fs.FileType.Directory for info in infos[1:]):
        raise CompactError(f"--lake {lake}: no lake there (no {'/, '.join(datasets)}/ directory)")
    return filesystem, root


def _partitions(filesystem: Any, root: str, datasets: Sequence[str]) -> list[str]:
    from pyarrow import fs

    found = []
    for dataset in datasets:
        base = f"{root}/{dataset}"
        if filesystem.get_file_info(base).type != fs.FileType.Directory:
            continue
        for cluster_dir in sorted(filesystem.get_file_info(fs.FileSelector(base)), key=lambda i: i.path):
            if cluster_dir.type != fs.FileType.Directory or not cluster_dir.base_name.startswith("cluster="):
                continue
            for date_dir in sorted(filesystem.get_file_info(fs.FileSelector(cluster_dir.path)), key=lambda i: i.path):
                if date_dir.type == fs.FileType.Directory and date_dir.base_name.startswith("date="):
                    found.append(date_dir.path)
    return found


def already_merged(filesystem: Any, files: list[Any]) -> list[Any]:
    """Of one partition's files (pyarrow FileInfos), the inputs of a merged file still beside it (a compact that
    crashed between the rename and the deletes): their rows are in the merged file too. Raises
    UnreadableFileError when a merged file cannot be read."""
    import pyarrow.parquet as pq

    present = {f.base_name: f for f in files}
    merged = [f for f in files if f.base_name.startswith(COMPACT_PREFIX)]
    if not merged or len(files) < 2:  # nearly always: nothing to open
        return []
    found = []
    for info in merged:
        with _reading(info.base_name), filesystem.open_input_file(info.path) as handle:
            metadata = pq.ParquetFile(handle).schema_arrow.metadata or {}
        for name in json.loads(metadata.get(INPUTS_KEY, b"[]")):
            if name in present and name != info.base_name:
                found.append(present.pop(name))
    return found


def _recover(filesystem: Any, files: list[Any]) -> int:
    """Deletes the inputs of a crashed run that are still next to its (complete) merged file. Returns how many."""
    leftovers = already_merged(filesystem, files)
    for info in leftovers:
        filesystem.delete_file(info.path)
    return len(leftovers)


def _part_files(filesystem: Any, directory: str) -> list[Any]:
    """A partition's data files (FileInfos): `part-*.parquet`, not the `.tmp-` ones being written."""
    from pyarrow import fs

    return [
        i
        for i in filesystem.get_file_info(fs.FileSelector(directory))
        if i.type == fs.FileType.File and i.base_name.startswith("part-") and i.base_name.endswith(".parquet")
    ]


def readable_files(lake: str, dataset: str) -> list[str] | None:
    """The files of `dataset` (paths relative to it) without the inputs a crashed compact left beside their merged
    file, which a reader would count twice; None when there are none such (read the whole directory)."""
    filesystem, root = _open_lake(lake, (dataset,))
    every: list[str] = []
    skipped = 0
    for directory in _partitions(filesystem, root, (dataset,)):
        listing = _part_files(filesystem, directory)
        leftovers = {i.path for i in already_merged(filesystem, listing)}
        skipped += len(leftovers)
        every += [i.path.removeprefix(f"{root}/{dataset}/") for i in listing if i.path not in leftovers]
    return every if skipped else None


def _merge(filesystem: Any, directory: str, inputs: Sequence[InputFile], name: str) -> int:
    """Streams the inputs into `directory/name` (temp name, then renamed); returns its size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows_in = 0
    schema = None
    for f in inputs:
        with _reading(f.name), filesystem.open_input_file(f.path) as handle:
            parquet = pq.ParquetFile(handle)
            file_schema = parquet.schema_arrow
            if schema is None:
                schema = file_schema
            elif not file_schema.equals(schema, check_metadata=False):
                raise CompactError(f"{directory}: {f.name} has another schema than {inputs[0].name}; left as it is")
            rows_in += parquet.metadata.num_rows
    assert schema is not None
    metadata = {**(schema.metadata or {}), INPUTS_KEY: json.dumps(sorted(f.name for f in inputs)).encode()}
    schema = schema.with_metadata(metadata)
    tmp, final = f"{directory}/.tmp-{name.removeprefix('part-')}", f"{directory}/{name}"
    try:
        with filesystem.open_output_stream(tmp) as out, pq.ParquetWriter(out, schema, compression="zstd") as writer:
            pending: list[Any] = []
            buffered = 0
            for f in inputs:
                with _reading(f.name), filesystem.open_input_file(f.path) as handle:
                    table = pq.ParquetFile(handle).read().replace_schema_metadata(metadata)
                pending.append(table)
                buffered += table.num_rows
                if buffered >= ROW_GROUP_ROWS:
                    writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
                    pending, buffered = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
        with filesystem.open_input_file(tmp) as handle:
            rows_out = pq.ParquetFile(handle).metadata.num_rows
        if rows_out != rows_in:
            raise CompactError(f"{directory}: merged {rows_out} rows from {rows_in}; inputs left as they are")
        filesystem.move(tmp, final)
    except BaseException:
        # Not written yet, or the target refuses even this: the daemon's retention prunes stale `.tmp-` files.
        with contextlib.suppress(Exception):
            filesystem.delete_file(tmp)
        raise
    return int(filesystem.get_file_info(final).size or 0)


def _delete_inputs(filesystem: Any, inputs: Sequence[InputFile]) -> None:
    for f in inputs:
        filesystem.delete_file(f.path)


def compact_partition(
    filesystem: Any, directory: str, older_than_s: float, now: float, summary: CompactSummary
) -> bool:
    """Compacts one partition directory; True when it merged (or finished merging) files."""
    from pyarrow import fs

    listing = _part_files(filesystem, directory)
    deleted = _recover(filesystem, listing)
    if deleted:
        summary.partitions_recovered += 1
        summary.inputs_deleted += deleted
        listing = [i for i in listing if filesystem.get_file_info(i.path).type == fs.FileType.File]
    inputs = [
        InputFile(i.path, i.base_name, int(i.size or 0))
        for i in listing
        if i.mtime is not None and now - i.mtime.timestamp() >= older_than_s
    ]
    if len(inputs) < 2:
        return False
    name = merged_name([f.name for f in inputs])
    existing = filesystem.get_file_info(f"{directory}/{name}")
    if existing.type == fs.FileType.File:  # this very merge already happened; its inputs were not all deleted
        size = int(existing.size or 0)
        summary.partitions_recovered += 1
        summary.inputs_deleted += len(inputs)
    else:
        size = _merge(filesystem, directory, inputs, name)
    _delete_inputs(filesystem, inputs)
    summary.partitions_compacted += 1
    summary.files_before += len(inputs)
    summary.files_after += 1
    summary.bytes_before += sum(f.size for f in inputs)
    summary.bytes_after += size
    summary.compacted.append(directory)
    return True


def compact_lake(
    lake: str,
    dataset: str = "all",
    older_than_hours: float = 1.0,
    say: Callable[[str], None] = _say,
    clock: Callable[[], float] = time.time,
) -> CompactSummary:
    """Compacts every partition of the chosen dataset(s). Raises CompactError on bad input."""
    if not older_than_hours >= 0:
        raise CompactError(f"--older-than-hours: must be 0 or more, not {older_than_hours}")
    datasets = _datasets(dataset)
    filesystem, root = _open_lake(lake, datasets)
    started = time.monotonic()
    summary = CompactSummary()
    from lagwatch.lake.writer import resolve_format

    if resolve_format(filesystem, root, "auto") == "delta":
        compact_delta(lake, root, datasets, older_than_hours, clock(), say, summary)
        summary.seconds = time.monotonic() - started
        return summary
    partitions = _partitions(filesystem, root, datasets)
    say(f"{len(partitions)} partition(s) in {lake} ({', '.join(datasets)})")
    for directory in partitions:
        summary.partitions_seen += 1
        before = summary.files_before, summary.bytes_before, summary.bytes_after
        try:
            merged = compact_partition(filesystem, directory, older_than_hours * 3600, clock(), summary)
        except CompactError as e:
            say(str(e))
            continue
        except UnreadableFileError as e:  # a corrupt or truncated file: the other partitions go on
            summary.partitions_unreadable += 1
            say(f"{directory.removeprefix(root).lstrip('/')}: left as it is, a file cannot be read: {e}")
            continue
        if merged:
            relative = directory.removeprefix(root).lstrip("/")
            files, size = summary.files_before - before[0], summary.bytes_before - before[1]
            say(f"{relative}: {files} files ({size} bytes) -> 1 ({summary.bytes_after - before[2]} bytes)")
    summary.seconds = time.monotonic() - started
    return summary


# Files a Delta compaction removed from the table stay this long before VACUUM deletes them: a report or backtest
# that started reading before the compaction still finds its files (Delta's own default).
VACUUM_RETENTION_HOURS = 168


def compact_delta(
    lake: str,
    root: str,
    datasets: Sequence[str],
    older_than_hours: float,
    now: float,
    say: Callable[[str], None],
    summary: CompactSummary,
) -> None:
    """A Delta lake: OPTIMIZE (delta-rs's compaction, bin-packing each partition's small files into one) of the
    dates before `now - older_than_hours`, then VACUUM of the files removed more than a week ago. Safe while the
    daemon appends: both commit through the Delta log, and a conflict is retried (measured: concurrent appends and
    compactions on S3 lost and doubled no row)."""
    import pyarrow as pa
    from deltalake import DeltaTable, WriterProperties
    from deltalake.exceptions import TableNotFoundError

    from lagwatch.lake.codec import date_of
    from lagwatch.lake.writer import delta_storage_options, delta_uri

    cutoff = date_of(now - older_than_hours * 3600) if older_than_hours > 0 else None
    for dataset in datasets:
        try:
            table = DeltaTable(delta_uri(lake, root, dataset), storage_options=delta_storage_options(lake))
        except TableNotFoundError:
            continue
        actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()  # delta-rs gives an arro3 table
        partitions = {(c, d) for c, d in zip(actions["partition.cluster"], actions["partition.date"], strict=True)}
        summary.partitions_seen += len(partitions)
        metrics = table.optimize.compact(
            partition_filters=[("date", "<", cutoff)] if cutoff else None,
            writer_properties=WriterProperties(compression="ZSTD"),
        )
        added, removed = json.loads(metrics["filesAdded"]), json.loads(metrics["filesRemoved"])
        summary.partitions_compacted += int(metrics["partitionsOptimized"])
        summary.files_before += int(metrics["numFilesRemoved"])
        summary.files_after += int(metrics["numFilesAdded"])
        summary.bytes_before += int(removed.get("totalSize") or 0)
        summary.bytes_after += int(added.get("totalSize") or 0)
        if metrics["numFilesRemoved"]:
            say(f"{dataset}: {metrics['numFilesRemoved']} files -> {metrics['numFilesAdded']} "
                f"in {metrics['partitionsOptimized']} partition(s) (Delta version {table.version()})")  # fmt: skip
        vacuumed = table.vacuum(retention_hours=VACUUM_RETENTION_HOURS, dry_run=False)
        if vacuumed:
            say(
                f"{dataset}: {len(vacuumed)} file(s) removed from the table over {VACUUM_RETENTION_HOURS} h ago deleted"
            )


# -- the command ------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", help="the lake's path or URI (local, s3://, gs://, hdfs://)")
    parser.add_argument(
        "--config", type=Path, help="the daemon's configuration: its lake.path, when --lake is not given"
    )
    parser.add_argument(
        "--dataset", default="all", help="snapshots, alerts, config, or all (default: all)", metavar="DATASET"
    )
    parser.add_argument(
        "--older-than-hours",
        default="1",
        metavar="HOURS",
        help="merge only files last written at least this long ago (default 1: the active partition is left alone)",
    )
    parser.add_argument(
        "--master", default=None, help="accepted like the other jobs' but unused: compact runs on pyarrow"
    )


def run(args: argparse.Namespace) -> int:
    try:  # parsed here, not by argparse, for a one-line error
        hours = float(args.older_than_hours)
    except ValueError:
        raise CompactError(f"--older-than-hours: not a number: {args.older_than_hours!r}") from None
    from lagwatch.pipeline.jobs import use_lake_config

    lake = args.lake
    if lake is None and args.config is None:
        raise CompactError("--lake or --config: say where the lake is")
    settings = use_lake_config(args.config)  # and its S3 access, for the store
    if lake is None:
        lake = settings.path if settings is not None else "lake"
    summary = compact_lake(lake, args.dataset, hours)
    print(summary.line())
    return 1 if summary.partitions_unreadable else 0  # a cron job's failure: someone should look at the file


def main(argv: list[str] | None = None) -> int:
    from lagwatch.pipeline.jobs import run_main

    return run_main("lagwatch pipeline compact", add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
