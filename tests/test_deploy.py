"""The Kubernetes manifests: the shipped config validates with lagwatch itself, probes hit real endpoints,
secrets come only from mounted files, and the pod is locked down."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lagwatch.config import load_settings
from lagwatch.serve.app import openapi_document

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_configmap_config_validates_with_secrets_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (config_map,) = _docs("configmap.yaml")
    config = tmp_path / "lagwatch.yaml"
    config.write_text(config_map["data"]["lagwatch.yaml"])
    (example_secret,) = _docs("secret.example.yaml")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for key, value in example_secret["stringData"].items():
        (secrets / key).write_text(value)
    monkeypatch.setenv("LAGWATCH_SECRETS_DIR", str(secrets))
    settings = load_settings(config)
    prod = settings.clusters["prod"]
    assert prod.security.sasl is not None and prod.security.sasl.password is not None
    assert prod.security.sasl.password.get_secret_value() == "change-me"
    assert (
        settings.notifiers.slack is not None and settings.notifiers.slack.token.get_secret_value() == "xoxb-change-me"
    )


def test_deployment_probes_security_and_no_secret_in_argv() -> None:
    (deployment,) = _docs("deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    paths = set(openapi_document()["paths"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" in paths
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" in paths
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert (
        sc["readOnlyRootFilesystem"] is True
        and sc["allowPrivilegeEscalation"] is False
        and sc["capabilities"]["drop"] == ["ALL"]
    )
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    argv = " ".join(container["args"]).lower()
    assert "password" not in argv and "token" not in argv
    assert all("valueFrom" not in e for e in container["env"])  # no secret through the environment either
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {e["name"]: e["value"] for e in container["env"]}["LAGWATCH_SECRETS_DIR"] == mounts["secrets"]
    (service,) = _docs("service.yaml")
    assert service["spec"]["ports"][0]["port"] == 9308


def test_the_pipeline_image_pins_the_s3_connector_the_tests_run_with() -> None:
    """The Spark tests on S3 load hadoop-aws and the AWS SDK bundle checked against these SHA-256s: the image's."""
    from tests.spark_jars import SPARK_JARS

    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for artifact, (jar, digest) in SPARK_JARS.items():
        group, name, version = artifact.split(":")
        assert f"{group.replace('.', '/')}/{name}/{version}/{jar}" in dockerfile
        assert f"{digest} {jar}" in dockerfile
