"""The `lagwatch pipeline` commands: one sub-command per Spark job, and what every job shares (the cluster to read,
the Spark master, the output directory, one-line errors). Each job is a module with `add_arguments(parser)`,
`run(args) -> int` and `main(argv)` (for spark-submit / `python -m`). Importing this module loads neither pyspark
nor kafka-python: the daemon's CLI imports it to build its parser.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lagwatch.errors import ConfigError, LagwatchError, exit_code_of

if TYPE_CHECKING:
    from lagwatch.config import ClusterConfig
    from lagwatch.lake import LakeConfig

# command name -> (module, help).
JOBS: dict[str, tuple[str, str]] = {
    "offsets-topic": (
        "lagwatch.pipeline.offsets_topic",
        "read the whole __consumer_offsets with Spark into Parquet: commits, latest, groups, expiry audit",
    ),
    "backtest": (
        "lagwatch.pipeline.backtest",
        "replay the lag history lake through the daemon's own pipeline step under candidate configs",
    ),
    "report": (
        "lagwatch.pipeline.report",
        "per group and day: lag percentiles, time over thresholds, incidents, worst partitions, expiry near misses"
        " (Parquet and one HTML page)",
    ),
    "compact": (
        "lagwatch.pipeline.compact",
        "OPTIMIZE and VACUUM the lake's Delta tables (a Parquet lake: merge its small files), while the daemon writes",
    ),
}


def add_pipeline_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pipeline = sub.add_parser("pipeline", help="the data pipeline's Spark jobs (needs the spark extra and Java 17)")
    jobs = pipeline.add_subparsers(required=True, metavar="JOB")
    for name, (module_name, help_text) in JOBS.items():
        module = importlib.import_module(module_name)
        parser = jobs.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(parser)
        parser.set_defaults(func=getattr(module, "run_job", None) or module.run)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--config", type=Path, help="YAML configuration file (with --cluster)")
    target.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] of a PLAINTEXT cluster")
    parser.add_argument("--cluster", help="the cluster's name in --config (may be left out if it has only one)")
    parser.add_argument("--timeout", type=float, default=15.0, help="Kafka request timeout in seconds (default 15)")


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[2]; under spark-submit, what spark-submit was given)",
    )
    parser.add_argument("--out", required=True, help="output directory (local path, or a URL Spark can write to)")


def cluster_from_args(args: argparse.Namespace) -> tuple[str, ClusterConfig]:
    """(name, ClusterConfig) from --config/--cluster or --bootstrap-server. Raises ConfigError."""
    from lagwatch.config import ClusterConfig, load_settings

    if args.config is not None:
        clusters = dict(load_settings(args.config).clusters)
        if args.cluster is None:
            if len(clusters) != 1:
                names = ", ".join(sorted(clusters)) or "none"
                raise ConfigError([f"--cluster: which cluster of {args.config}? (configured: {names})"])
            return next(iter(clusters.items()))
        if args.cluster not in clusters:
            names = ", ".join(sorted(clusters)) or "none"
            raise ConfigError([f"--cluster: no cluster {args.cluster!r} in {args.config} (configured: {names})"])
        return args.cluster, clusters[args.cluster]
    if not 0 < args.timeout <= 600:
        raise ConfigError(["--timeout: must be more than 0 and at most 600 seconds"])
    try:
        cluster = ClusterConfig(bootstrap_servers=args.bootstrap_server, request_timeout_s=args.timeout)
    except Exception as e:
        errors = getattr(e, "errors", None)
        detail = str(errors()[0]["msg"]).removeprefix("Value error, ") if callable(errors) else str(e)
        raise ConfigError([f"--bootstrap-server: {detail}"]) from None
    return args.cluster or "default", cluster


def check_out_dir(out: str) -> None:
    """A local --out must be a directory this process can write (created if missing); URLs are left to Spark."""
    if "://" in out:
        return
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise LagwatchError(f"--out {out}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".lagwatch-write-check-"):
            pass
    except OSError as e:
        raise LagwatchError(f"--out {out}: not writable ({e.strerror or type(e).__name__})") from None


def use_lake_config(config: Path | str | None) -> LakeConfig | None:
    """--config's `lake:` settings when the file has them (the daemon's own file, as the chart's CronJobs give it),
    read as the daemon reads them (keys from the secrets directory). Their S3 access is exported as the AWS
    variables, which every S3 client of this process reads (pyarrow, and Hadoop's s3a in the JVM it starts, whose
    own chain reads the keys there): the keys reach no argv, no Spark setting and no log."""
    if config is None:
        return None
    from lagwatch.config import _check_yaml, load_settings

    data = _check_yaml(Path(config))
    if not isinstance(data, dict) or not isinstance(data.get("lake"), dict):
        return None
    lake = load_settings(Path(config)).lake
    from lagwatch import logs

    logs.configure("WARNING", "text", secrets=logs.secret_values(lake))
    access = lake.s3
    if access.endpoint is not None:
        os.environ["AWS_ENDPOINT_URL_S3"] = access.endpoint
    os.environ["AWS_REGION"] = access.region
    if access.access_key_id is not None and access.secret_access_key is not None:
        os.environ["AWS_ACCESS_KEY_ID"] = access.access_key_id.get_secret_value()
        os.environ["AWS_SECRET_ACCESS_KEY"] = access.secret_access_key.get_secret_value()
        os.environ.pop("AWS_SESSION_TOKEN", None)
    return lake


def progress(message: str) -> None:
    print(f"lagwatch: {message}", file=sys.stderr, flush=True)


def default_master(master: str | None) -> str | None:
    """local[2] unless given, or unless spark-submit started this process (it has chosen the master). ConfigError
    for a master Spark would not take (said before anything starts)."""
    if master is not None:
        from lagwatch.pipeline.session import check_master

        check_master(master)
        return master
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[2]"


# The last line of a Python traceback: `ModuleNotFoundError: No module named 'pyarrow'`.
_PYTHON_CAUSE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning)(?::.*)?$")


def _worker_cause(lines: list[str]) -> str | None:
    """What a Python worker raised: the last exception line of the last Python traceback in a Spark error (the
    JVM puts it under `PythonException:` lines and above its own stack trace)."""
    start = max((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), default=None)
    if start is None:
        return None
    cause = None
    for line in lines[start + 1 :]:
        if line.startswith(("at ", "File ", "...", "Caused by:", "Driver stacktrace")):
            if cause is not None and line.startswith(("at ", "Caused by:", "Driver stacktrace")):
                break
            continue
        if _PYTHON_CAUSE.match(line) and not line.startswith(("org.", "java.", "scala.", "py4j.")):
            cause = line
    return cause


def spark_error(e: BaseException) -> str:
    """One line from a Spark or Py4J exception (never its JVM stack trace). A Python worker's failure is told by
    its cause (`ModuleNotFoundError: No module named 'pyarrow'`), with what to do when a module is missing."""
    text = getattr(e, "desc", None)  # pyspark's captured JVM exceptions (AnalysisException...)
    java = getattr(e, "java_exception", None)  # py4j's Py4JJavaError
    if text is None and java is not None:
        with contextlib.suppress(Exception):
            text = str(java.toString())
    text = text or str(e)
    full = "\n".join(filter(None, (text, str(e), getattr(e, "stackTrace", None) or "")))
    lines = [line.strip() for line in full.splitlines() if line.strip()]
    cause = _worker_cause(lines)
    if cause is not None:
        line = f"a Python worker failed: {cause}"
        if cause.startswith(("ModuleNotFoundError", "ImportError")):
            line += " (the executors' Python needs lagwatch with its spark extra: set PYSPARK_PYTHON to it)"
        return line[:400]
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    line = lines[0] if lines else type(e).__name__
    return line[:400]


def run_main(
    prog: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """A job's `main` for spark-submit and `python -m`: the same arguments and one-line errors as the CLI."""
    from lagwatch import logs

    parser = argparse.ArgumentParser(prog=prog)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure("WARNING", "text")
    return exit_code_of(lambda: run(args))
