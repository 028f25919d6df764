"""Errors a caller can catch. Each carries a one-line message fit for a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable


class LagwatchError(Exception):
    """Base class: str(error) is one line that tells the user what went wrong."""

    exit_code = 1


class ConfigError(LagwatchError):
    """The configuration is invalid; `problems` holds one line per field."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class MissingExtraError(LagwatchError):
    """A feature needs the `spark` extra, which is not installed: exit 2, as every pipeline job says it."""

    exit_code = 2


class ToolMissingError(LagwatchError):
    """A program lagwatch needs on this machine (java, mvn) is not installed."""


class DevBrokerError(LagwatchError):
    """The local Kafka broker could not be fetched, formatted or started."""


class ClusterError(LagwatchError):
    """A whole cluster could not be polled: unreachable, authentication failed, timed out."""

    def __init__(self, cluster: str, kind: str, detail: str) -> None:
        self.cluster = cluster
        self.kind = kind
        self.detail = detail
        super().__init__(f"cluster {cluster!r}: {kind}: {detail}")


def exit_code_of(command: Callable[[], int]) -> int:
    """Runs a command; lagwatch's errors become one line on stderr and their exit code, never a traceback."""
    try:
        return int(command())
    except ConfigError as e:
        for problem in e.problems:
            print(f"lagwatch: config error: {problem}", file=sys.stderr)
        return e.exit_code
    except LagwatchError as e:
        print(f"lagwatch: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


# How to install what the Spark jobs, the lake and object storage need: lagwatch is installed from its checkout or
# a built wheel (it is not on PyPI), with the `spark` extra.
SPARK_EXTRA = "the spark extra (from the checkout: pip install '.[spark]'; from a wheel: pip install 'WHEEL[spark]')"
