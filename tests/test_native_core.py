"""The core compiled with mypyc (setup.py) says exactly what its pure-Python source says, and a compiled module that
no longer matches its source is never run: lagwatch then runs the source, and says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHICH = "import lagwatch, lagwatch.rules.engine as e, lagwatch.lag.offsets as o; print(lagwatch.CORE); print(e.__file__); print(o.__file__)"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LAGWATCH_PURE_PYTHON"}
    return {**env, **extra}


def _which(cwd: Path, env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", WHICH], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_this_checkout_runs_the_compiled_core() -> None:
    """`make test` builds it (`make native`): the tests below compare it with the source, so it must be there."""
    core, engine, offsets = _which(REPO, _env())
    assert core.startswith("compiled"), f"{core}: run `make native`"
    assert engine.endswith(".so") and offsets.endswith(".so")
    core, engine, offsets = _which(REPO, _env(LAGWATCH_PURE_PYTHON="1"))
    assert core == "pure Python (LAGWATCH_PURE_PYTHON is set)"
    assert engine.endswith("engine.py") and offsets.endswith("offsets.py")


def test_the_compiled_core_says_exactly_what_its_source_says(tmp_path: Path) -> None:
    """bench/same_output.py: /metrics, every alert and every notification after each of 30 polls of a cluster with
    every kind of group and fault, byte for byte."""
    outputs = {}
    for mode, env in (("compiled", _env()), ("pure", _env(LAGWATCH_PURE_PYTHON="1"))):
        out = tmp_path / f"{mode}.txt"
        subprocess.run(
            [sys.executable, "bench/same_output.py", "--groups", "400", "--polls", "30", "--out", str(out)],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
        )
        outputs[mode] = out.read_bytes()
    assert len(outputs["pure"]) > 100_000  # alerts, notifications and series, not an empty run
    assert outputs["compiled"] == outputs["pure"]


def test_a_compiled_module_older_than_its_source_is_never_run(tmp_path: Path) -> None:
    """An edited checkout (the compiled modules sit beside their source, and Python prefers them): every compiled
    module is imported from source (they call each other directly once compiled), and the reason is given."""
    manifest = json.loads((REPO / "lagwatch" / "_native_build.json").read_text())
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "lagwatch", copy / "lagwatch", ignore=shutil.ignore_patterns("__pycache__"))
    for shared in REPO.glob("lagwatch_core__mypyc*.so"):
        shutil.copy(shared, copy)
    core, engine, _ = _which(copy, _env())
    assert core.startswith("compiled") and engine.endswith(".so")  # the copy as built

    engine_source = copy / "lagwatch" / "rules" / "engine.py"
    engine_source.write_text(engine_source.read_text() + "\nEDITED_AFTER_THE_BUILD = True\n")
    core, engine, offsets = _which(copy, _env())
    assert core == (
        "pure Python (the compiled lagwatch.rules.engine no longer matches its source: rebuild with `make native`)"
    )
    assert engine == str(engine_source) and offsets.endswith("offsets.py")
    assert "lagwatch.rules.engine" in manifest["modules"] and manifest["schema"] == 1

    # A damaged build record: no compiled module found beside its source is run.
    (copy / "lagwatch" / "_native_build.json").write_text("{not json")
    core, engine, offsets = _which(copy, _env())
    assert core == "pure Python (compiled modules without their build record: rebuild with `make native`)"
    assert engine == str(engine_source) and offsets.endswith("offsets.py")
