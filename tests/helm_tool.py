"""Where the test suite finds helm: LAGWATCH_HELM, the binary `make test` builds (deploy/tools/install-helm.sh,
cached under ~/.cache/lagwatch), or helm on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "lagwatch"
_INSTALLER = ROOT / "deploy" / "tools" / "install-helm.sh"


def helm_binary() -> str | None:
    explicit = os.environ.get("LAGWATCH_HELM")
    if explicit:
        return explicit
    version = re.search(r'HELM_VERSION="\$\{HELM_VERSION:-([^}]+)\}"', _INSTALLER.read_text())
    cache = Path(os.environ.get("LAGWATCH_CACHE", Path.home() / ".cache" / "lagwatch"))
    if version:
        built = cache / "helm" / version.group(1) / "helm"
        if built.is_file():
            return str(built)
    return shutil.which("helm")


def template(helm: str, *args: str, release: str = "lagwatch", namespace: str = "monitoring") -> list[dict]:
    """`helm template` of the chart; raises CalledProcessError (stderr in .stderr) when it refuses the values."""
    out = subprocess.run(
        [helm, "template", release, str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]
