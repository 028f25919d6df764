"""The build's one step beyond pyproject.toml: the pure core's hottest modules compiled to C with mypyc.

Why: at 1M group-partitions the whole daemon step took 10.3 s in pure Python against issue #31's 8 s, with a
flat profile (about 1 us of Python per group-partition in each of the lag rows, the measures, the history and the
rules). The same source compiled: 7.0 s against 10.5 s, and 0.68 s against 0.94 s at 100k, side by side on a
quiet machine (bench/README.md, "The core compiled with mypyc").

The source stays the pure Python the tests, the type checker and Spark read. Without a C compiler, or with
LAGWATCH_PURE_PYTHON=1 at build time, the package is built pure; `lagwatch.native` chooses at import time, and
falls back to the source when a compiled module no longer matches it (an edited checkout).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Module files compiled: the per-group-partition loops of one pipeline step (lag rows, measures, history, rules).
COMPILED = [
    "lagwatch/lag/offsets.py",
    "lagwatch/history/measures.py",
    "lagwatch/history/store.py",
    "lagwatch/history/timeline.py",
    "lagwatch/history/rings.py",
    "lagwatch/history/tracks.py",
    "lagwatch/rules/thresholds.py",
    "lagwatch/rules/progress.py",
    "lagwatch/rules/expiry.py",
    "lagwatch/rules/context.py",
    "lagwatch/rules/resolver.py",
    "lagwatch/rules/engine.py",
    "lagwatch/rules/text.py",
    # The poll's biggest answer, 22 MB at 1M group-partitions, decoded on kafka-python's I/O thread (0.47 -> 0.32 s),
    # and its reader, which also reads __consumer_offsets for the exact clocks.
    "lagwatch/collect/offset_fetch_answer.py",
    "lagwatch/offsets_topic/decode.py",
    "lagwatch/serve/metrics.py",
    "lagwatch/collect/assemble.py",
    "lagwatch/collect/list_groups_answer.py",
]
MANIFEST = "lagwatch/_native_build.json"  # which modules were compiled, from which source (lagwatch.native)


def _digest(path: str) -> str:
    return hashlib.sha256((ROOT / path).read_bytes()).hexdigest()


class BuildCompiledCore(build_ext):
    """Builds the compiled modules if it can; if the C compiler is missing or fails, the package stays pure
    Python (slower, the same behaviour) and says so, rather than failing the install."""

    def run(self) -> None:
        target = ROOT if (self.inplace or getattr(self, "editable_mode", False)) else Path(self.build_lib)
        manifest = target / MANIFEST
        manifest.unlink(missing_ok=True)
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as e:  # whatever the compiler's failure: build pure instead
            print(f"lagwatch: the compiled core was not built ({e}); installing pure Python", file=sys.stderr)
            self.extensions = []
            return
        modules = {path.removesuffix(".py").replace("/", "."): _digest(path) for path in COMPILED}
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"schema": 1, "python": sys.version.split()[0], "modules": modules}) + "\n")


def _extensions() -> list[object]:
    if os.environ.get("LAGWATCH_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify

        return list(mypycify(COMPILED, opt_level="3", group_name="lagwatch_core"))
    except (ImportError, SystemExit, Exception) as e:  # no mypyc, or it refused the source: build pure
        print(f"lagwatch: the compiled core was not built ({e!r}); installing pure Python", file=sys.stderr)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildCompiledCore})
