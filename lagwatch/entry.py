"""The `lagwatch` command's entry point: a Ctrl-C while the CLI's modules load (pydantic, kafka-python: about half
a second) stops quietly, as one later does, instead of printing an import's traceback."""

from __future__ import annotations

import os
import signal
from types import FrameType


def _stopped_while_loading(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"lagwatch: stopped while starting\n")
    os._exit(130)  # nothing started yet: nothing to stop


# At import, not in main(): the script imports this module first, and a Ctrl-C between the two was a traceback too.
signal.signal(signal.SIGINT, _stopped_while_loading)


def main() -> int:
    from lagwatch.cli import main as cli_main

    signal.signal(signal.SIGINT, signal.default_int_handler)  # the CLI's own handling from here on
    try:
        return cli_main()
    except KeyboardInterrupt:  # before a command took over Ctrl-C (its parser loads the pipeline's modules)
        os.write(2, b"lagwatch: interrupted\n")
        return 130
