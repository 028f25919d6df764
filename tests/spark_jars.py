"""The Spark connectors the pipeline image bakes in besides Kafka's: Hadoop's S3 connector and Delta Lake's, fetched
once with Maven (as the Kafka jars are) into ~/.cache/lagwatch/spark-jars and checked against the SHA-256s the
image pins (deploy/Dockerfile). The tests' Spark sessions load them from there (LAGWATCH_SPARK_JARS)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from lagwatch.devbroker.jars import cache_root, require_tool

# artifact -> (jar, sha256): the same pins as deploy/Dockerfile's spark-jars stage (a test checks they agree).
SPARK_JARS = {
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
    "io.delta:delta-spark_2.13:4.4.0": (
        "delta-spark_2.13-4.4.0.jar",
        "27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead",
    ),
    "io.delta:delta-storage:4.4.0": (
        "delta-storage-4.4.0.jar",
        "c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc",
    ),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_spark_jars() -> Path:
    target = cache_root() / "spark-jars" / "hadoop-3.5.0-delta-4.4.0"
    done = target / ".complete"
    if done.exists():
        return target
    mvn = require_tool("mvn", "Maven (apt-get install maven)")
    target.mkdir(parents=True, exist_ok=True)
    for artifact, (jar, digest) in SPARK_JARS.items():
        if not (target / jar).exists():
            subprocess.run([mvn, "-B", "-q", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={target}"],
                           check=True, capture_output=True, timeout=1800)  # fmt: skip
        if sha256(target / jar) != digest:
            (target / jar).unlink()
            raise RuntimeError(f"{jar}: not the SHA-256 pinned in deploy/Dockerfile")
    done.write_text("ok\n")
    return target
