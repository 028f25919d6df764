"""EDGE: the daemon's lake writer. Buffers rows in memory; a background thread writes them as Parquet files when
`roll_rows` are buffered or `roll_seconds` after the oldest one, and everything at stop.

Files are written under a temporary name starting with `.` (which pyarrow, pandas and Spark skip) and renamed when
complete, so a reader never sees half a file. A write the target refuses (disk full, path gone, no permission) is
logged once per streak and counted; the rows stay buffered and are tried again, up to `max_buffer_rows`, past which
the oldest polls are dropped (counted). Polling and alerting never wait for the lake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from lagwatch.alerts import AlertBook
from lagwatch.alerts.transitions import Transition, TransitionTracker
from lagwatch.history.measures import ESTIMATED, EXACT
from lagwatch.lake import codec
from lagwatch.lake.settings import LakeConfig, S3Access, is_s3
from lagwatch.model import ClusterSnapshot, TopicPartition
from lagwatch.offsets_topic import Record
from lagwatch.rules import Evaluation

log = logging.getLogger("lagwatch.lake")
DATASETS: dict[str, dict[str, str]] = {
    "snapshots": codec.SNAPSHOT_COLUMNS,
    "alerts": codec.ALERT_COLUMNS,
    "config": codec.CONFIG_COLUMNS,
}
RETRY_S = 5.0  # after a refused write, the first retry; doubling up to roll_seconds
RETENTION_CHECK_S = 3600.0


def arrow_schema(columns: Mapping[str, str]) -> Any:
    import pyarrow as pa

    types = {
        "int16": pa.int16(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema(
        [pa.field(name, types[kind]) for name, kind in columns.items()],
        metadata={"lagwatch.schema_version": str(codec.SCHEMA_VERSION)},
    )


def s3_from_env() -> S3Access:
    """S3 settings from the AWS SDKs' own variables (for jobs given only --lake): AWS_ENDPOINT_URL_S3 or
    AWS_ENDPOINT_URL, AWS_REGION; the keys are read by the SDKs themselves (AWS_ACCESS_KEY_ID...)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return S3Access(endpoint=endpoint, region=region)


def open_filesystem(path: str, s3: S3Access | None = None) -> tuple[Any, str]:
    """A local path (made absolute) or a URI pyarrow knows (s3://, gs://, hdfs://, file://). Hadoop's `s3a://`,
    which Spark needs, names the same place as pyarrow's `s3://`: one `lake` setting serves both. S3 is opened
    with `s3` (else the AWS variables), every request bounded in time and tried once: the writer's own retries
    (rows kept) are the only ones."""
    from pyarrow import fs

    if is_s3(path):
        parts = urlsplit(path)
        access = s3 or s3_from_env()
        query = dict(parse_qsl(parts.query))  # pyarrow's URI options, as they were taken before: region=...
        if "region" in query:
            access = access.model_copy(update={"region": query["region"]})
        options: dict[str, Any] = {
            "region": access.region,
            "connect_timeout": access.connect_timeout_s,
            "request_timeout": access.request_timeout_s,
            "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=1),
            "allow_delayed_open": True,  # one PutObject per file, not a multipart upload of several calls
        }
        if access.endpoint is not None:
            endpoint = urlsplit(access.endpoint)
            options.update(endpoint_override=endpoint.netloc, scheme=endpoint.scheme)
        if access.access_key_id is not None and access.secret_access_key is not None:
            options.update(
                access_key=access.access_key_id.get_secret_value(),
                secret_key=access.secret_access_key.get_secret_value(),
            )
        return fs.S3FileSystem(**options), f"{parts.netloc}{parts.path}".rstrip("/")
    if "://" in path:
        filesystem, root = fs.FileSystem.from_uri(path)
        return filesystem, root.rstrip("/")
    return fs.LocalFileSystem(), os.path.abspath(path)


def resolve_format(filesystem: Any, root: str, configured: str) -> str:
    """`delta` or `parquet`: as configured, or (`auto`) as the lake already is, Delta for a new one."""
    from pyarrow import fs

    if configured != "auto":
        return configured
    log_dir, table = filesystem.get_file_info([f"{root}/snapshots/_delta_log", f"{root}/snapshots"])
    if log_dir.type == fs.FileType.Directory:
        return "delta"
    return "parquet" if table.type == fs.FileType.Directory else "delta"


def delta_uri(path: str, root: str, dataset: str) -> str:
    """A dataset's Delta table as delta-rs names it (s3a:// is s3:// there)."""
    return f"s3://{root}/{dataset}" if is_s3(path) else f"{root}/{dataset}"


def delta_storage_options(path: str, s3: S3Access | None = None) -> dict[str, str]:
    """delta-rs's options for the lake's store, every request bounded as pyarrow's are (its defaults retried a
    frozen store for 181 s; with these a write fails in 5.6 s, measured, and leaves no half-commit). Without keys
    here, delta-rs reads the AWS variables itself."""
    if not is_s3(path):
        return {}
    access = s3 or s3_from_env()
    options = {
        "aws_region": access.region,
        "timeout": f"{access.request_timeout_s:g}s",
        "connect_timeout": f"{access.connect_timeout_s:g}s",
        "max_retries": "1",
        "retry_timeout": f"{access.request_timeout_s:g}s",
    }
    if access.endpoint is not None:
        options["aws_endpoint_url"] = access.endpoint
        options["aws_allow_http"] = str(access.endpoint.startswith("http://")).lower()
    if access.access_key_id is not None and access.secret_access_key is not None:
        options["aws_access_key_id"] = access.access_key_id.get_secret_value()
        options["aws_secret_access_key"] = access.secret_access_key.get_secret_value()
    return options


def config_hash(rules: Mapping[str, Any], alerts: Mapping[str, Any]) -> str:
    canonical = json.dumps({"rules": rules, "alerts": alerts}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass
class _Batch:
    dataset: str
    cluster: str
    date: str
    columns: codec.Columns
    rows: int
    created: float  # monotonic
    # The file its first attempt wrote: a retry writes the same batches under the same name. A write that timed
    # out on the client may still complete on the store (a frozen S3 server did, once thawed), and the retry under
    # a new name then doubled every row of it.
    file: str | None = None


@dataclass
class LakeStats:
    rows_written: int = 0
    files_written: int = 0
    write_failures: int = 0
    dropped_rows: int = 0
    buffered_rows: int = 0
    last_write_s: float = 0.0


class LakeWriter:
    def __init__(self, config: LakeConfig, clock: Callable[[], float] = time.time) -> None:
        import pyarrow  # noqa: F401  (fail at start, not at the first roll, when the extra is missing)

        self.config = config
        self.clock = clock
        self.fs, self.root = open_filesystem(config.path, config.s3)
        self.schemas = {name: arrow_schema(columns) for name, columns in DATASETS.items()}
        self.stats = LakeStats()
        self.trackers: dict[str, TransitionTracker] = {}
        self.config_hashes: dict[str, str] = {}
        self._buffer: deque[_Batch] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._failing = False
        self._retry_at = 0.0
        self._retry_s = RETRY_S
        self._retention_checked = -RETENTION_CHECK_S
        self._write_lock = threading.Lock()  # one flush at a time (the thread, or stop)
        self.format: str | None = None if config.format == "auto" else config.format
        self._sequence = 0
        self._app_id = f"lagwatch-{uuid.uuid4().hex}"  # this writer's Delta transactions
        self._thread: threading.Thread | None = None

    # -- what the daemon calls ---------------------------------------------------------------------------------

    def start(self) -> LakeWriter:
        self._thread = threading.Thread(target=self._run, name="lake-writer", daemon=True)
        self._thread.start()
        log.info("lake recording", extra={"path": self.config.path})
        return self

    def record_config(
        self,
        cluster: str,
        rules: Mapping[str, Any],
        alerts: Mapping[str, Any],
        max_gap_s: float,
        read_committed: bool,
        poll_interval_s: float,
        book: AlertBook,
    ) -> None:
        """The configuration in force for `cluster` from now on (at start), and the alerts already firing."""
        from lagwatch import __version__

        now = self.clock()
        digest = config_hash(rules, alerts)
        self.config_hashes[cluster] = digest
        tracker = self.trackers[cluster] = TransitionTracker(cluster)
        tracker.seed(book)
        columns = codec.empty(codec.CONFIG_COLUMNS)
        values = {
            "schema_version": codec.SCHEMA_VERSION,
            "recorded_at": now,
            "time": now,
            "config_hash": digest,
            "rules_json": json.dumps(rules, sort_keys=True),
            "alerts_json": json.dumps(alerts, sort_keys=True),
            "max_gap_s": max_gap_s,
            "read_committed": read_committed,
            "poll_interval_s": poll_interval_s,
            "lagwatch_version": __version__,
        }
        for name in columns:
            columns[name].append(values[name])
        self._add(_Batch("config", cluster, codec.date_of(now), columns, 1, time.monotonic()))

    def record(self, snapshot: ClusterSnapshot, evaluation: Evaluation, book: AlertBook) -> list[Transition]:
        """After each step: the poll, and the alert transitions the step made."""
        self.record_poll(snapshot, evaluation)
        return self.record_transitions(snapshot, evaluation, book)

    def record_poll(
        self,
        snapshot: ClusterSnapshot,
        evaluation: Evaluation,
        records: Sequence[Record] = (),
        records_caught_up: bool = False,
    ) -> None:
        """The poll's rows. Needs no lock on the alert book: the daemon calls it outside (the costly part, about
        0.5 s at 100k group-partitions, must not hold up the other clusters and the API)."""
        figures: dict[str, dict[TopicPartition, tuple[int | None, str, float | None, bool, bool]]] = {}
        for group_id, measure in evaluation.measures.items():
            # From the measure's columns: its rows are built only on demand (a PartitionLag, a LagTime and a
            # PartitionMeasure per group-partition, as many as the figures themselves).
            lag, kinds = measure.lag, measure.lag_kinds
            figures[group_id] = {
                tp: (
                    lag.lag(i),
                    lag.states[i].value,
                    measure.seconds(i),
                    bool(kinds[i] & ESTIMATED),
                    bool(kinds[i] & EXACT),
                )
                for i, tp in enumerate(lag.tps)
            }
        columns = codec.snapshot_rows(snapshot, figures, evaluation.expiries, records, records_caught_up)
        date = codec.date_of(snapshot.taken_at)
        self._add(_Batch("snapshots", snapshot.cluster, date, columns, len(columns["ordinal"]), time.monotonic()))

    def record_transitions(
        self, snapshot: ClusterSnapshot, evaluation: Evaluation, book: AlertBook
    ) -> list[Transition]:
        """The alert transitions the step made; under the book's lock, before notifications are taken from it."""
        tracker = self.trackers.setdefault(snapshot.cluster, TransitionTracker(snapshot.cluster))
        transitions = tracker.observe(book, evaluation.now)
        if transitions:
            alert_columns = transition_rows(transitions, self.config_hashes.get(snapshot.cluster, ""))
            date = codec.date_of(snapshot.taken_at)
            self._add(_Batch("alerts", snapshot.cluster, date, alert_columns, len(transitions), time.monotonic()))
        return transitions

    def stop(self, timeout: float = 30.0) -> None:
        """Writes what is buffered (one attempt) and stops the thread."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # a write that does not end (a target that never answers) holds the lock
                log.error(
                    "lake rows lost at shutdown: a write to the target did not end in time",
                    extra={"rows": self.stats.buffered_rows, "waited_s": round(timeout, 1)},
                )
                return
        self.flush()
        if self.stats.buffered_rows:
            log.error("lake rows lost at shutdown: the target refused them", extra={"rows": self.stats.buffered_rows})

    # -- buffer -------------------------------------------------------------------------------------------------

    def _add(self, batch: _Batch) -> None:
        with self._lock:
            self._buffer.append(batch)
            self.stats.buffered_rows += batch.rows
            while self.stats.buffered_rows > self.config.max_buffer_rows:
                # The oldest poll goes; alert transitions and configuration rows (a few each) are kept.
                oldest = next((i for i, b in enumerate(self._buffer) if b.dataset == "snapshots"), None)
                if oldest is None or self._buffer[oldest] is batch:
                    break
                dropped = self._buffer[oldest]
                del self._buffer[oldest]
                self.stats.buffered_rows -= dropped.rows
                self.stats.dropped_rows += dropped.rows
            if self.stats.buffered_rows >= self.config.roll_rows:
                self._wake.notify_all()

    def _due(self) -> bool:
        if not self._buffer:
            return False
        if self._failing:
            return time.monotonic() >= self._retry_at
        return (
            self.stats.buffered_rows >= self.config.roll_rows
            or time.monotonic() - self._buffer[0].created >= self.config.roll_seconds
        )

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._due():
                    self._wake.wait(timeout=0.5)
                if self._stopping:
                    return
            self.flush()
            self._prune()

    # -- files --------------------------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Writes every buffered row; True when all were written. On failure the rest stays buffered."""
        with self._write_lock:
            with self._lock:
                batches = list(self._buffer)
                self._buffer.clear()
            if not batches:
                return True
            started = time.monotonic()
            keys: dict[tuple[str, str, str, str | None], list[_Batch]] = {}
            for b in batches:  # batches tried before keep their file; the new ones of a partition share one
                keys.setdefault((b.dataset, b.cluster, b.date, b.file), []).append(b)
            unwritten: list[_Batch] = []
            error: Exception | None = None
            try:
                lake_format = self._lake_format()
            except Exception as e:  # the store does not answer: nothing is written, all is kept
                lake_format, error = "", e
            for (dataset, cluster, date, file), group in keys.items():
                if error is None:
                    name = file or self._new_name()
                    for b in group:
                        b.file = name
                    try:
                        if lake_format == "delta":
                            self._write_delta(dataset, name, file is not None, group)
                        else:
                            self._write(dataset, cluster, date, name, group)
                        continue
                    except Exception as e:  # OSError, ArrowIOError, DeltaError (disk full, permission, timeout)...
                        error = e
                unwritten += group
            with self._lock:
                written = sum(b.rows for b in batches) - sum(b.rows for b in unwritten)
                self.stats.buffered_rows -= written
                # Back at the front, in their order (a batch added meanwhile stays behind them).
                for b in sorted(unwritten, key=lambda b: b.created, reverse=True):
                    self._buffer.appendleft(b)
                if error is None:
                    if self._failing:
                        log.warning("lake writes work again", extra={"write_failures": self.stats.write_failures})
                    self._failing = False
                    self._retry_s = RETRY_S
                else:
                    self.stats.write_failures += 1
                    if not self._failing:
                        log.error(
                            "lake write failed; rows stay buffered and are tried again",
                            extra={"path": self.config.path, "error": str(error), "buffered": self.stats.buffered_rows},
                        )
                    self._failing = True
                    self._retry_at = time.monotonic() + self._retry_s
                    self._retry_s = min(self._retry_s * 2, max(RETRY_S, self.config.roll_seconds))
                self.stats.last_write_s = time.monotonic() - started
            return error is None

    def _new_name(self) -> str:
        self._sequence += 1  # a Delta append's transaction version (`txn-N`); a Parquet file's name
        if self.format == "delta":
            return f"txn-{self._sequence}"
        return f"part-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"

    def _lake_format(self) -> str:
        """`lake.format`, or with `auto` what the lake already is: Delta where the snapshots table has a Delta
        log, Parquet where it has files without one (a lake written before Delta: kept as it is, read as it is),
        Delta for a new lake. Asked of the store once, at the first write (never at start: a store that does not
        answer must not hold up the daemon)."""
        if self.format is None:
            self.format = resolve_format(self.fs, self.root, self.config.format)
            log.info("lake format", extra={"path": self.config.path, "format": self.format})
        return self.format

    def _arrow_table(self, dataset: str, batches: list[_Batch]) -> Any:
        import pyarrow as pa

        schema = self.schemas[dataset]
        merged: dict[str, list[Any]] = {name: [] for name in schema.names}
        for b in batches:
            for name, values in b.columns.items():
                merged[name] += values
        arrays = []
        for field in schema:
            values = merged[field.name]
            if pa.types.is_timestamp(field.type):
                micros = [None if v is None else round(v * 1_000_000) for v in values]
                arrays.append(pa.array(micros, pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def _write_delta(self, dataset: str, name: str, tried: bool, batches: list[_Batch]) -> None:
        """One append to the dataset's Delta table, partitioned by cluster and date, as a transaction of this
        writer (`txn` app id and version): a retry of an append whose commit did land (it timed out on this side)
        finds its version in the table and is not appended twice."""
        import pyarrow as pa
        from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        version = int(name.removeprefix("txn-"))
        uri = delta_uri(self.config.path, self.root, dataset)
        options = delta_storage_options(self.config.path, self.config.s3)
        if tried:
            try:
                done = DeltaTable(uri, storage_options=options).transaction_version(self._app_id)
            except TableNotFoundError:
                done = None
            if done is not None and done >= version:
                self._count(batches)
                return
        table = self._arrow_table(dataset, batches)
        keys = [b.cluster for b in batches for _ in range(b.rows)], [b.date for b in batches for _ in range(b.rows)]
        table = table.append_column("cluster", pa.array(keys[0], pa.string()))
        table = table.append_column("date", pa.array(keys[1], pa.string()))
        write_deltalake(
            uri,
            table,
            mode="append",
            partition_by=["cluster", "date"],
            schema_mode="merge",  # a column added by a later schema version joins the table
            writer_properties=WriterProperties(compression="ZSTD"),
            storage_options=options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(self._app_id, version)],
                custom_metadata={"lagwatch.schema_version": str(codec.SCHEMA_VERSION)},
            ),
        )
        self._count(batches)

    def _count(self, batches: list[_Batch]) -> None:
        self.stats.rows_written += sum(b.rows for b in batches)
        self.stats.files_written += 1

    def _write(self, dataset: str, cluster: str, date: str, file_name: str, batches: list[_Batch]) -> None:
        import pyarrow.parquet as pq

        table = self._arrow_table(dataset, batches)
        directory = f"{self.root}/{dataset}/cluster={cluster}/date={date}"
        tmp, final = f"{directory}/.tmp-{file_name}", f"{directory}/{file_name}"
        if is_s3(self.config.path):  # a PUT is whole or nothing: no temporary name (a rename there is a copy)
            with self.fs.open_output_stream(final) as out:
                pq.write_table(table, out, compression="zstd")
            self.stats.rows_written += table.num_rows
            self.stats.files_written += 1
            return
        self.fs.create_dir(directory, recursive=True)
        try:
            with self.fs.open_output_stream(tmp) as out:
                pq.write_table(table, out, compression="zstd")
            self.fs.move(tmp, final)
        except BaseException:
            with contextlib.suppress(Exception):  # it may not exist, or the target may refuse even that
                self.fs.delete_file(tmp)
            raise
        self.stats.rows_written += table.num_rows
        self.stats.files_written += 1

    def _prune(self) -> None:
        """Deletes date partitions older than `retention_days`, and temporary files a crash left behind."""
        if self.config.retention_days <= 0 or time.monotonic() - self._retention_checked < RETENTION_CHECK_S:
            return
        if self.format is None:  # not known before the first write
            return
        self._retention_checked = time.monotonic()
        try:
            if self.format == "delta":
                prune_delta(self.config.path, self.root, self.config.s3, self.config.retention_days, self.clock())
            else:
                prune(self.fs, self.root, self.config.retention_days, self.clock())
        except Exception as e:
            log.warning("lake retention failed; tried again in an hour", extra={"error": str(e)})


def prune_delta(path: str, root: str, s3: S3Access | None, retention_days: int, now: float) -> int:
    """Deletes the rows of dates older than `retention_days` from each Delta table (whole partitions: delta-rs
    removes their files from the table without rewriting any); `compact`'s VACUUM deletes the files later."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    cutoff = (datetime.fromtimestamp(now, UTC) - timedelta(days=retention_days)).strftime("%Y-%m-%d")
    deleted = 0
    for dataset in DATASETS:
        try:
            table = DeltaTable(delta_uri(path, root, dataset), storage_options=delta_storage_options(path, s3))
        except TableNotFoundError:
            continue
        metrics = table.delete(f"date < '{cutoff}'")
        deleted += int(metrics.get("num_deleted_rows") or 0)
    if deleted:
        log.info("lake rows past retention deleted", extra={"rows": deleted, "before": cutoff})
    return deleted


def prune(filesystem: Any, root: str, retention_days: int, now: float) -> list[str]:
    from pyarrow import fs

    cutoff = (datetime.fromtimestamp(now, UTC) - timedelta(days=retention_days)).strftime("%Y-%m-%d")
    deleted = []
    for dataset in DATASETS:
        base = f"{root}/{dataset}"
        if filesystem.get_file_info(base).type != fs.FileType.Directory:
            continue
        for cluster_dir in filesystem.get_file_info(fs.FileSelector(base)):
            if cluster_dir.type != fs.FileType.Directory or not cluster_dir.base_name.startswith("cluster="):
                continue
            for date_dir in filesystem.get_file_info(fs.FileSelector(cluster_dir.path)):
                date = date_dir.base_name.removeprefix("date=")
                if date_dir.type == fs.FileType.Directory and date_dir.base_name.startswith("date=") and date < cutoff:
                    filesystem.delete_dir(date_dir.path)
                    deleted.append(date_dir.path)
                elif date_dir.type == fs.FileType.Directory:
                    for f in filesystem.get_file_info(fs.FileSelector(date_dir.path)):
                        stale = f.mtime is not None and now - f.mtime.timestamp() > 3600
                        if f.base_name.startswith(".tmp-") and stale:
                            filesystem.delete_file(f.path)
    if deleted:
        log.info("lake partitions past retention deleted", extra={"partitions": len(deleted)})
    return deleted


def transition_rows(transitions: list[Transition], digest: str) -> codec.Columns:
    columns = codec.empty(codec.ALERT_COLUMNS)
    for t in transitions:
        values = {
            **t.alert_row(),
            "schema_version": codec.SCHEMA_VERSION,
            "at": t.at,
            "time": t.at,
            "transition": t.transition.value,
            "details_json": json.dumps(t.details, sort_keys=True, default=str),
            "config_hash": digest,
        }
        for name in columns:
            columns[name].append(values[name])
    return columns
