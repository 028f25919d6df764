"""The shape of the package, held whole-module: the CORE stays pure (no Kafka, Slack, HTTP or file I/O imports, no
clock reads), edges never import the wiring (daemon, command line), and no module imports itself through others."""

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
    "mypy_extensions",  # mypyc_attr: how a class compiled with mypyc (setup.py) may be used; no I/O
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
        "json",  # the alert rows' labels, as the lake and the backtest write them
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


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    """`name` is one of `prefixes` or inside one (`re` is not `requests`, `lagwatch.lag` not `lagwatch.lake`)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_core_imports_only_core_and_pure_stdlib() -> None:
    assert len(CORE) >= 15
    for path in CORE:
        for name in _imports(ast.parse(path.read_text())):
            assert _within(name, ALLOWED_PREFIXES), f"{path.name} imports {name}"


def test_prefixes_are_whole_names() -> None:
    assert not _within("requests", ("re",)) and not _within("lagwatch.lake", ("lagwatch.lag",))
    assert _within("re", ("re",)) and _within("lagwatch.lag.offsets", ("lagwatch.lag",))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Every module of lagwatch -> the lagwatch modules it imports, wherever the import stands (a function's lazy
    import is an edge too). `from a.b import c` is an edge to a.b.c when c is a module, else to a.b."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]  # fmt: skip
            edges.update(t for t in targets if t in modules and t != name)
    return graph


EDGES = tuple(
    f"lagwatch.{name}"
    for name in ("collect", "notify", "serve", "state", "lake", "pipeline", "devbroker", "runtime", "check")
)
WIRING = ("lagwatch.daemon", "lagwatch.cli", "lagwatch.entry", "lagwatch.__main__")


def test_core_never_imports_an_edge_and_edges_never_import_the_wiring() -> None:
    graph = _graph()
    core = tuple(f"lagwatch.{name}" for name in (*CORE_PACKAGES, "model", "matchers", "step"))
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if _within(module, core):
                assert _within(target, core) or target in ("lagwatch.errors",), f"core {module} imports {target}"
            if _within(module, EDGES):
                assert not _within(target, WIRING), f"edge {module} imports {target}"


def test_no_import_circles() -> None:
    """Tarjan's strongly connected components over the whole package: each must be one module."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert len(graph) > 80
    assert circles == [], circles


def test_core_reads_no_clock_and_opens_no_file() -> None:
    for path in CORE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"
