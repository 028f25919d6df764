"""A real S3-compatible server for the lake's tests: SeaweedFS (`weed mini`, Apache-2.0), built once from the Go
module proxy by deploy/tools/install-seaweedfs.sh (make test-deps) and cached. Every port on loopback and chosen
free, its telemetry off; one bucket and one static key made at start. `freeze`/`thaw` (SIGSTOP/SIGCONT: connections
accepted, never answered) and `kill` (SIGKILL: refused) stand for an object store that hangs or dies."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.helm_tool import ROOT

INSTALLER = ROOT / "deploy" / "tools" / "install-seaweedfs.sh"
ACCESS_KEY = "lagwatch-test"
SECRET_KEY = "lagwatch-test-secret-key"  # the tests look for it in logs, argv and metrics
BUCKET = "lake"


def weed_binary() -> str | None:
    """LAGWATCH_TEST_WEED, else the cached build (None when it is not built: `make test-deps` builds it)."""
    if os.environ.get("LAGWATCH_TEST_WEED"):
        return os.environ["LAGWATCH_TEST_WEED"]
    cache = Path(os.environ.get("LAGWATCH_CACHE") or Path.home() / ".cache" / "lagwatch") / "seaweedfs"
    builds = sorted(cache.glob("*/.built"))
    return str(builds[-1].with_name("weed")) if builds else None


def free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class S3Server:
    binary: str
    data: Path
    bucket: str = BUCKET
    ports: list[int] = field(default_factory=lambda: free_ports(12))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    def env(self) -> dict[str, str]:
        """The AWS variables a job given only --lake reads."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": "us-east-1"}  # fmt: skip

    def delta_options(self) -> dict[str, str]:
        return {"aws_endpoint_url": self.endpoint, "aws_allow_http": "true", "aws_region": "us-east-1",
                "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}  # fmt: skip

    def lake_settings(self, prefix: str) -> dict[str, object]:
        return {"enabled": True, "path": f"s3://{self.bucket}/{prefix}", "s3": {"endpoint": self.endpoint}}

    def start(self) -> S3Server:
        self.data.mkdir(parents=True, exist_ok=True)
        config = self.data / "s3.json"
        identity = {"name": "lagwatch", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}  # fmt: skip
        config.write_text(json.dumps({"identities": [identity]}))
        s3, s3g, master, masterg, filer, filerg, volume, volumeg, admin, adming, metrics, debug = self.ports
        args = [
            self.binary, "mini", f"-dir={self.data / 'store'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.config={config}", f"-bucket={self.bucket}", "-admin.ui=false", "-master.telemetry=false",
            f"-s3.port={s3}", f"-s3.port.grpc={s3g}", f"-master.port={master}", f"-master.port.grpc={masterg}",
            f"-filer.port={filer}", f"-filer.port.grpc={filerg}", f"-volume.port={volume}",
            f"-volume.port.grpc={volumeg}", f"-admin.port={admin}", f"-admin.port.grpc={adming}",
            "-admin.port.legacy=0", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-metricsPort={metrics}",
            f"-debug.port={debug}", "-webdav=false",
        ]  # fmt: skip
        (self.data / "store").mkdir(exist_ok=True)
        log = open(self.data / "weed.log", "ab")  # noqa: SIM115 (the server's, closed when it ends)
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = (self.data / "weed.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"weed exited ({self.proc.returncode}):\n{tail}")
            try:
                urllib.request.urlopen(f"{self.endpoint}/{self.bucket}", timeout=1)
            except urllib.error.HTTPError as e:
                if e.code in (403, 404):  # answering; anonymous requests are refused
                    self._warm_up()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"SeaweedFS did not answer on {self.endpoint} within {timeout} s")

    def _warm_up(self) -> None:
        """The first write after a start allocates a volume (2-9 s measured): done here, not in a timed test."""
        fs = self.filesystem()
        deadline = time.monotonic() + 60
        while True:
            try:
                with fs.open_output_stream(f"{self.bucket}/.warm-up") as out:
                    out.write(b"x")
                fs.delete_file(f"{self.bucket}/.warm-up")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def filesystem(self):  # type: ignore[no-untyped-def]
        from pyarrow import fs

        return fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region="us-east-1",
                               endpoint_override=self.endpoint.removeprefix("http://"), scheme="http")  # fmt: skip

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)

    def restart(self) -> None:
        """After a kill: the same data, the same ports."""
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)
