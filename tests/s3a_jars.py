"""Hadoop's S3 connector for the Spark tests on S3, fetched once with Maven (as the Kafka jars are) into
~/.cache/lagwatch/spark-s3a and checked against the SHA-256s the pipeline image pins (deploy/Dockerfile)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from lagwatch.devbroker.jars import cache_root, require_tool

# artifact -> (jar, sha256): the same pins as deploy/Dockerfile's spark-jars stage (a test checks they agree).
S3A_JARS = {
    "org.apache.hadoop:hadoop-aws:3.5.0": (
        "hadoop-aws-3.5.0.jar",
        "66bd9eefb938b1a1657487324b63c13df2d8b17164a1dd24e0ef37b905bc5baa",
    ),
    "software.amazon.awssdk:bundle:2.35.4": (
        "bundle-2.35.4.jar",
        "db4b55f24ad1b4e70f17eb1717a4de76a8dadc5a27d764be7c44ff67b2c1c677",
    ),
    "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.3.1": (
        "analyticsaccelerator-s3-1.3.1.jar",
        "4959a9747cbb479c73c3ffbcd479bee5b014f8b2880994585a8693fb9d24675e",
    ),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_s3a_jars() -> Path:
    target = cache_root() / "spark-s3a" / "hadoop-3.5.0"
    done = target / ".complete"
    if done.exists():
        return target
    mvn = require_tool("mvn", "Maven (apt-get install maven)")
    target.mkdir(parents=True, exist_ok=True)
    for artifact, (jar, digest) in S3A_JARS.items():
        if not (target / jar).exists():
            subprocess.run([mvn, "-B", "-q", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={target}"],
                           check=True, capture_output=True, timeout=1800)  # fmt: skip
        if sha256(target / jar) != digest:
            (target / jar).unlink()
            raise RuntimeError(f"{jar}: not the SHA-256 pinned in deploy/Dockerfile")
    done.write_text("ok\n")
    return target
