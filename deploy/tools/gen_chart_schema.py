"""Writes deploy/helm/lagwatch/values.schema.json: the chart's own values, and under `config` lagwatch's settings
schema (pydantic's, from lagwatch.config.Settings), so a misspelt or out-of-range setting fails at `helm install`.

Secret fields (SecretStr) are forbidden in values: they come from mounted Kubernetes Secrets only.
Run `python deploy/tools/gen_chart_schema.py` after changing lagwatch's settings; a test checks the file is current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lagwatch.config import Settings

OUT = Path(__file__).resolve().parents[1] / "helm" / "lagwatch" / "values.schema.json"
SECRET = {
    "not": {},
    "description": "A secret never goes into values: mount it from a Kubernetes Secret (values `secrets`).",
}
# Set by the chart itself (the pod's volume and port).
CHART_OWNED = ("state_dir",)


def _is_secret(node: Any) -> bool:
    return node == SECRET or (isinstance(node, dict) and SECRET in node.get("anyOf", []))


def _forbid_secrets(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("format") == "password":
            return SECRET
        out = {k: _forbid_secrets(v) for k, v in node.items() if k != "title"}
        if "required" in out:  # a required secret (e.g. the Slack token) comes from the secrets directory
            secret = {name for name, prop in out.get("properties", {}).items() if _is_secret(prop)}
            out["required"] = [name for name in out["required"] if name not in secret]
            if not out["required"]:
                del out["required"]
        return out
    if isinstance(node, list):
        return [_forbid_secrets(v) for v in node]
    return node


def config_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    schema = _forbid_secrets(Settings.model_json_schema(mode="validation"))
    defs = schema.pop("$defs")
    for name in CHART_OWNED:
        schema["properties"].pop(name)
    schema["properties"]["clusters"]["propertyNames"] = {"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"}
    schema["description"] = "lagwatch's configuration (see config/lagwatch.example.yaml); the chart sets state_dir"
    return schema, defs


def _obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


STR = {"type": "string"}
BOOL = {"type": "boolean"}
MAP = {"type": "object"}
LIST = {"type": "array"}
STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
QUANTITY = {"type": ["string", "number"], "pattern": "^[0-9.]+([EPTGMK]i?|[mkMGTPE])?$"}
CRON = {"type": "string", "pattern": r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$"}
IMAGE = _obj(
    {
        "repository": {"type": "string", "minLength": 1},
        "tag": STR,
        "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    },
    required=["repository"],
)
RESOURCES = _obj(
    {
        "requests": {"type": "object", "additionalProperties": QUANTITY},
        "limits": {"type": "object", "additionalProperties": QUANTITY},
        "claims": LIST,
    }
)
SERVICE_ACCOUNT = _obj({"create": BOOL, "name": STR, "annotations": STR_MAP})
CIDR = {"type": "string", "pattern": r"^[0-9a-fA-F.:]+/[0-9]{1,3}$"}
SECRET_FILE = {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"}


def chart_schema() -> dict[str, Any]:
    config, defs = config_schema()
    job = _obj({"enabled": BOOL, "schedule": CRON, "args": {"type": "array", "items": STR}})
    return _obj(
        {
            "global": MAP,
            "image": IMAGE,
            "imagePullSecrets": LIST,
            "nameOverride": STR,
            "fullnameOverride": STR,
            "config": config,
            "secrets": {
                "type": "array",
                "items": _obj(
                    {
                        "name": {"type": "string", "minLength": 1},
                        "optional": BOOL,
                        "items": {
                            "type": "array",
                            "items": _obj(
                                {"key": STR, "path": SECRET_FILE, "mode": {"type": "integer"}}, required=["key", "path"]
                            ),
                        },
                    },
                    required=["name"],
                ),
            },
            "lake": _obj(
                {
                    "url": {
                        "type": "string",
                        "pattern": r"^((s3a?|gs)://[a-z0-9][a-z0-9.-]{1,62}(/.*)?)?$",
                        "description": "the lake of the daemon and every CronJob: s3://bucket/prefix",
                    },
                    "s3": _obj(
                        {
                            "endpoint": {"type": "string", "pattern": r"^(https?://[^/\s]+/?)?$"},
                            "region": {"type": "string", "minLength": 1},
                        }
                    ),
                    "existingSecret": {"type": "string", "pattern": "^([a-z0-9][a-z0-9.-]*)?$"},
                    "secretKeys": _obj(
                        {"accessKeyId": SECRET_FILE, "secretAccessKey": SECRET_FILE},
                        required=["accessKeyId", "secretAccessKey"],
                    ),
                }
            ),
            "tlsSecrets": {
                "type": "array",
                "items": _obj({"name": SECRET_FILE, "secretName": STR}, required=["name", "secretName"]),
            },
            "replicaCount": {
                "const": 1,
                "description": "lagwatch keeps one writer per state directory; two replicas would both notify",
            },
            "persistence": _obj(
                {
                    "enabled": BOOL,
                    "storageClass": STR,
                    "accessModes": {"type": "array", "items": STR, "minItems": 1},
                    "size": QUANTITY,
                    "existingClaim": STR,
                }
            ),
            "service": _obj(
                {
                    "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                    "port": PORT,
                    "annotations": STR_MAP,
                }
            ),
            "serviceAccount": SERVICE_ACCOUNT,
            "podAnnotations": STR_MAP,
            "podLabels": STR_MAP,
            "extraEnv": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "value"],
                    "not": {"required": ["valueFrom"]},
                    "properties": {
                        "name": {
                            "type": "string",
                            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "not": {"pattern": "(PASSWORD|TOKEN|SECRET|WEBHOOK)"},
                        },
                        "value": STR,
                    },
                    "description": "plain values only: secrets are mounted files (values `secrets`)",
                },
            },
            "resources": RESOURCES,
            "podSecurityContext": MAP,
            "securityContext": MAP,
            "livenessProbe": MAP,
            "readinessProbe": MAP,
            "startupProbe": MAP,
            "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
            "nodeSelector": STR_MAP,
            "tolerations": LIST,
            "affinity": MAP,
            "priorityClassName": STR,
            "serviceMonitor": _obj(
                {
                    "enabled": BOOL,
                    "interval": DURATION,
                    "scrapeTimeout": DURATION,
                    "labels": STR_MAP,
                    "metricRelabelings": LIST,
                }
            ),
            "prometheusRule": _obj(
                {
                    "enabled": BOOL,
                    "labels": STR_MAP,
                    "runbookUrl": STR,
                    "lagSeconds": _obj(
                        {
                            "warning": {"type": "number", "exclusiveMinimum": 0},
                            "critical": {"type": "number", "exclusiveMinimum": 0},
                            "for": DURATION,
                        },
                        required=["warning", "critical", "for"],
                    ),
                    "offsetExpirySeconds": _obj(
                        {
                            "warning": {"type": "number", "exclusiveMinimum": 0},
                            "critical": {"type": "number", "exclusiveMinimum": 0},
                        },
                        required=["warning", "critical"],
                    ),
                    "lagwatchDown": _obj({"for": DURATION}, required=["for"]),
                    "clusterDown": _obj({"for": DURATION}, required=["for"]),
                    "notificationsStuck": _obj(
                        {"queued": {"type": "integer", "minimum": 0}, "for": DURATION}, required=["queued", "for"]
                    ),
                    "lakeWritesFailing": _obj({"for": DURATION}, required=["for"]),
                }
            ),
            "podDisruptionBudget": _obj({"enabled": BOOL, "maxUnavailable": {"type": ["integer", "string"]}}),
            "networkPolicy": _obj(
                {
                    "enabled": BOOL,
                    "kafka": {
                        "type": "array",
                        "items": _obj(
                            {"cidr": CIDR, "ports": {"type": "array", "items": PORT, "minItems": 1}},
                            required=["cidr", "ports"],
                        ),
                    },
                    "slack": _obj(
                        {"cidrs": {"type": "array", "items": CIDR}, "except": {"type": "array", "items": CIDR}}
                    ),
                    "extraEgress": LIST,
                    "dns": _obj({"namespaceSelector": MAP, "podSelector": MAP}),
                    "ingressFrom": LIST,
                }
            ),
            "grafanaDashboards": _obj({"enabled": BOOL, "namespace": STR, "labels": STR_MAP, "annotations": STR_MAP}),
            "pipeline": _obj(
                {
                    "image": IMAGE,
                    "serviceAccount": SERVICE_ACCOUNT,
                    "env": LIST,
                    "resources": RESOURCES,
                    "report": job,
                    "compact": job,
                    "concurrencyPolicy": {"enum": ["Allow", "Forbid", "Replace"]},
                    "successfulJobsHistoryLimit": {"type": "integer", "minimum": 0},
                    "failedJobsHistoryLimit": {"type": "integer", "minimum": 0},
                    "backoffLimit": {"type": "integer", "minimum": 0},
                    "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                }
            ),
        },
        **{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "lagwatch chart values"},
        **{"$defs": defs},
        # A pipeline CronJob without the lake failed every night ("--lake lake: no such directory"): refused here.
        allOf=[_needs_lake(job_name) for job_name in ("report", "compact")],
    )


def _needs_lake(job_name: str) -> dict[str, Any]:
    enabled = {"properties": {job_name: {"properties": {"enabled": {"const": True}}, "required": ["enabled"]}}}
    return {
        "if": {"properties": {"pipeline": {**enabled, "required": [job_name]}}, "required": ["pipeline"]},
        "then": {
            "properties": {"lake": {"properties": {"url": {"minLength": 1}}, "required": ["url"]}},
            "required": ["lake"],
            "description": f"pipeline.{job_name} needs lake.url (s3://bucket/prefix)",
        },
    }


def render() -> str:
    return json.dumps(chart_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
