"""The CORE packages stay pure: no Kafka, Slack, HTTP or file I/O imports, no clock reads."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lagwatch"
CORE_PACKAGES = ("lag", "history", "rules", "alerts", "offsets_topic")
CORE = [
    PACKAGE / "model.py",
    PACKAGE / "matchers.py",
    PACKAGE / "step.py",
    *(path for name in CORE_PACKAGES for path in sorted((PACKAGE / name).glob("*.py"))),
]
ALLOWED_PREFIXES = (
    *(f"lagwatch.{name}" for name in ("model", "matchers", "step", *CORE_PACKAGES)),
    "pydantic",  # the settings models (config types) of rules and alerts
    "re2",  # user-supplied regexes run on RE2 (linear time): lagwatch.matchers
    *(
        "__future__",
        "collections",
        "dataclasses",
        "enum",
        "typing",
        "math",
        "bisect",
        "re",
        "datetime",
        "itertools",
        "functools",
        "struct",
        "contextlib",
        "operator",
        "array",  # the history's per-poll rings: machine numbers in memory
        "base64",  # ... and in the saved document
        "zlib",
        "types",  # MappingProxyType: read-only labels shared by every finding of a group and topic
    ),
)
FORBIDDEN_CALLS = {"time", "monotonic", "now", "open", "utcnow"}


def _imports(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_core_imports_only_core_and_pure_stdlib() -> None:
    assert len(CORE) >= 15
    for path in CORE:
        for name in _imports(ast.parse(path.read_text())):
            assert name.startswith(ALLOWED_PREFIXES), f"{path.name} imports {name}"


def test_core_reads_no_clock_and_opens_no_file() -> None:
    for path in CORE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"
