"""Which core runs: the modules setup.py compiled with mypyc, or their pure-Python source.

Compiled modules sit beside their source, and Python imports an extension module before a .py of the same name.
So a compiled module that no longer matches its source (a checkout edited or updated since the build) would run
the old code in silence. At import, before any of them is loaded, the build's manifest (each source's SHA-256) is
compared with the source; if one differs, or LAGWATCH_PURE_PYTHON is set, all of them are imported from source
(they call each other directly once compiled: a mix would not do). Hashing the eighteen files takes about 1 ms.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / "_native_build.json"
SCHEMA = 1


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Imports the named modules from their .py, never from the extension module beside it."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


def _source(module: str) -> Path:
    return PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")


def _source_digest(module: str) -> str | None:
    try:
        return hashlib.sha256(_source(module).read_bytes()).hexdigest()
    except OSError:
        return None


def _compiled_beside_source() -> frozenset[str]:
    """The modules that have an extension module beside their .py (found only when the manifest is not read)."""
    found = set()
    for built in PACKAGE_DIR.rglob("*.so"):
        stem = built.name.split(".")[0]
        if built.with_name(stem + ".py").exists():
            found.add(".".join(("lagwatch", *built.relative_to(PACKAGE_DIR).parent.parts, stem)))
    return frozenset(found)


def choose() -> str:
    """Sets which core is imported; returns what runs, in words (logged at start, shown by `lagwatch --version`)."""
    try:
        manifest = json.loads(MANIFEST.read_text())
        modules = frozenset(manifest["modules"]) if manifest["schema"] == SCHEMA else None
        digests: dict[str, str] = manifest["modules"]
    except FileNotFoundError:
        modules, digests = None, {}
    except (OSError, ValueError, KeyError, TypeError):
        modules, digests = None, {}
    if modules is None:  # no build record: any compiled module found is of a build nobody vouches for
        modules = _compiled_beside_source()
        if not modules:
            return "pure Python (not compiled)"
        reason = "pure Python (compiled modules without their build record: rebuild with `make native`)"
    elif os.environ.get("LAGWATCH_PURE_PYTHON"):
        reason = "pure Python (LAGWATCH_PURE_PYTHON is set)"
    else:
        stale = sorted(m for m in modules if _source_digest(m) != digests.get(m))
        if not stale:
            return f"compiled (mypyc: {len(modules)} core modules)"
        reason = f"pure Python (the compiled {stale[0]} no longer matches its source: rebuild with `make native`)"
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(modules))
    return reason


CORE = choose()
