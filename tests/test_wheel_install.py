"""lagwatch as a user installs it: a wheel built from the checkout, in a fresh virtualenv, without and then with the
`spark` extra (it is not on PyPI). The wheel's commands run outside the checkout, so nothing of the tree leaks in."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# In `make test-long` (CI runs it after `make test`): building the wheel compiles the core (setup.py, about 45 s)
# and installing it with the spark extra takes as long again; `make test` stays under 15 minutes without it.
pytestmark = pytest.mark.long


def _run(*args: str | Path, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, ROOT, cwd=out)
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("lagwatch-*.whl")
    return found


def _setup_compiled() -> list[str]:
    """setup.py's COMPILED: every module it lists is compiled into the wheel."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "COMPILED"]
    modules = ast.literal_eval(value)
    assert modules and all(m.endswith(".py") for m in modules)
    return list(modules)


def test_the_wheel_installs_and_runs_without_then_with_the_spark_extra(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python, lagwatch = env_dir / "bin" / "python", env_dir / "bin" / "lagwatch"
    installed = _run(python, "-m", "pip", "install", "-q", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]

    where = _run(python, "-c", "import lagwatch; print(lagwatch.__file__)", cwd=tmp_path)
    assert str(env_dir) in where.stdout, where  # the wheel's copy, not the checkout's
    version = _run(lagwatch, "--version", cwd=tmp_path)  # the core compiled into the wheel (setup.py), and run
    compiled = len(_setup_compiled())
    assert version.stdout.strip() == f"lagwatch 0.1.0, core: compiled (mypyc: {compiled} core modules)", version
    assert _run(python, "-c", "import pyarrow", cwd=tmp_path).returncode != 0  # the extra is not there

    plain = tmp_path / "plain.yaml"
    plain.write_text("clusters: {c: {bootstrap_servers: ['127.0.0.1:9']}}\n")
    summary = _run(lagwatch, "validate", "--config", plain, cwd=tmp_path)
    assert summary.returncode == 0 and "c" in summary.stdout, summary
    lake = tmp_path / "lake.yaml"
    lake.write_text(plain.read_text() + f"lake: {{enabled: true, path: {tmp_path}/l}}\n")
    refused = _run(lagwatch, "validate", "--config", lake, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "lake.enabled" in refused.stderr, refused.stderr
    assert "pip install '.[spark]'" in refused.stderr
    backtest = _run(
        lagwatch, "pipeline", "backtest", "--lake", tmp_path / "l", "--output", tmp_path / "o", cwd=tmp_path
    )
    assert backtest.returncode == 2 and "spark extra" in backtest.stderr and "Traceback" not in backtest.stderr

    with_spark = _run(python, "-m", "pip", "install", "-q", f"{wheel}[spark]", cwd=tmp_path)
    assert with_spark.returncode == 0, with_spark.stderr[-2000:]
    assert _run(python, "-c", "import pyarrow, pyspark", cwd=tmp_path).returncode == 0
    accepted = _run(lagwatch, "validate", "--config", lake, cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
