"""The OpenAPI 3.1 document of lagwatch's HTTP API (served at /api/v1/openapi.json)."""

from __future__ import annotations

from typing import Any

from lagwatch import __version__


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "error")
_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_CLUSTER = {"name": "cluster", "in": "path", "required": True, "schema": {"type": "string"}}
_GROUP = {"name": "group", "in": "path", "required": True, "schema": {"type": "string"}}
_READ: list[dict[str, list[str]]] = [{"bearer": []}, {}]  # open unless http.read_token is set

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "lagwatch",
        "version": __version__,
        "description": "Kafka consumer lag: state, alerts, silences.",
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
            "Cluster": {
                "type": "object",
                "required": ["name", "up"],
                "properties": {
                    "name": {"type": "string"},
                    "up": {"type": "boolean"},
                    "last_poll": _NUM,
                    "last_success": _NUM,
                    "poll_duration_s": _NUM,
                    "groups": _INT,
                    "polls": {"type": "integer"},
                    "failed_polls": {"type": "integer"},
                    "skipped_polls": {"type": "integer"},
                    "error": {
                        "type": ["object", "null"],
                        "properties": {"kind": {"type": "string"}, "detail": {"type": "string"}},
                    },
                },
            },
            "GroupSummary": {
                "type": "object",
                "required": ["cluster", "group", "state", "kind", "members"],
                "properties": {
                    "cluster": {"type": "string"},
                    "group": {"type": "string"},
                    "state": {"type": "string"},
                    "kind": {"enum": ["classic", "simple", "consumer", "other", "unknown"]},
                    "members": {"type": "integer"},
                    "error": _STR,
                    "lag": _INT,
                    "max_lag": _INT,
                    "max_lag_seconds": _NUM,
                    "lag_seconds_estimated": {"type": ["boolean", "null"]},
                    "eta_s": _NUM,
                    "falling_behind": {"type": ["boolean", "null"]},
                    "production_rate": _NUM,
                    "consumption_rate": _NUM,
                    "offsets_expire_at": _NUM,
                },
            },
            "Partition": {
                "type": "object",
                "properties": {
                    "topic": {"type": "string"},
                    "partition": {"type": "integer"},
                    "committed_offset": _INT,
                    "log_start_offset": _INT,
                    "log_end_offset": _INT,
                    "lag": _INT,
                    "lag_state": {"enum": ["ok", "no_commit", "below_log_start", "unknown"]},
                    "lag_seconds": _NUM,
                    "lag_seconds_estimated": {"type": "boolean"},
                    "lag_seconds_exact": {"type": "boolean"},
                    "member_id": _STR,
                    "client_id": _STR,
                    "host": _STR,
                },
            },
            "GroupDetail": {
                "allOf": [
                    _ref("GroupSummary"),
                    {
                        "type": "object",
                        "properties": {
                            "partitions": {"type": "array", "items": _ref("Partition")},
                            "alerts": {"type": "array", "items": _ref("Alert")},
                        },
                    },
                ]
            },
            "Alert": {
                "type": "object",
                "required": ["rule", "severity", "state", "labels", "summary"],
                "properties": {
                    "rule": {"type": "string"},
                    "severity": {"enum": ["info", "warning", "critical"]},
                    "state": {"enum": ["pending", "firing", "resolved"]},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "summary": {"type": "string"},
                    "details": {"type": "object"},
                    "started_at": {"type": "number"},
                    "fired_at": _NUM,
                    "resolved_at": _NUM,
                    "runbook_url": _STR,
                    "silenced_by": _STR,
                },
            },
            "Silence": {
                "type": "object",
                "required": ["id", "matchers", "ends_at"],
                "properties": {
                    "id": {"type": "string"},
                    "matchers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "starts_at": _NUM,
                    "ends_at": {"type": "number"},
                    "comment": {"type": "string"},
                    "created_by": {"type": "string"},
                },
            },
            "SilenceCreate": {
                "type": "object",
                "required": ["matchers", "ends_at"],
                "additionalProperties": False,
                "properties": {
                    "matchers": {
                        "type": "object",
                        "minProperties": 1,
                        "additionalProperties": {"type": "string"},
                        "description": "label -> regex (whole value); labels: cluster, group, topic, rule, severity, routing labels",
                    },
                    "ends_at": {"type": "string", "format": "date-time", "description": "with a time zone"},
                    "starts_at": {"type": "string", "format": "date-time"},
                    "comment": {"type": "string"},
                    "created_by": {"type": "string"},
                },
            },
        },
    },
    "paths": {
        "/healthz": {
            "get": {
                "summary": "The process is alive (never depends on Kafka)",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "alive")},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Every cluster has had a successful poll",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "ready"), "503": _json({"type": "object"}, "not yet")},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus exposition (rendered once per poll)",
                "security": [],
                "responses": {"200": {"description": "text exposition format 0.0.4"}},
            }
        },
        "/api/v1/clusters": {
            "get": {
                "summary": "Clusters and their poll health",
                "security": _READ,
                "responses": {"200": _json({"type": "array", "items": _ref("Cluster")}, "clusters"), "401": _ERROR},
            }
        },
        "/api/v1/clusters/{cluster}": {
            "get": {
                "summary": "One cluster",
                "security": _READ,
                "parameters": [_CLUSTER],
                "responses": {"200": _json(_ref("Cluster"), "cluster"), "401": _ERROR, "404": _ERROR},
            }
        },
        "/api/v1/clusters/{cluster}/groups": {
            "get": {
                "summary": "Groups of a cluster, as of its last successful poll",
                "security": _READ,
                "parameters": [_CLUSTER],
                "responses": {
                    "200": _json({"type": "array", "items": _ref("GroupSummary")}, "groups"),
                    "401": _ERROR,
                    "404": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/api/v1/clusters/{cluster}/groups/{group}": {
            "get": {
                "summary": "One group: status, lag, lag seconds, ETA, expiry, partitions, active alerts",
                "security": _READ,
                "parameters": [_CLUSTER, _GROUP],
                "responses": {"200": _json(_ref("GroupDetail"), "group"), "401": _ERROR, "404": _ERROR},
            }
        },
        "/api/v1/alerts": {
            "get": {
                "summary": "Alerts (pending, firing, resolved not yet announced)",
                "security": _READ,
                "parameters": [
                    {"name": n, "in": "query", "required": False, "schema": {"type": "string"}}
                    for n in ("cluster", "group", "state")
                ],
                "responses": {"200": _json({"type": "array", "items": _ref("Alert")}, "alerts"), "401": _ERROR},
            }
        },
        "/api/v1/silences": {
            "get": {
                "summary": "Active and future silences",
                "security": _READ,
                "responses": {"200": _json({"type": "array", "items": _ref("Silence")}, "silences"), "401": _ERROR},
            },
            "post": {
                "summary": "Create a silence",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("SilenceCreate")}}},
                "responses": {"201": _json(_ref("Silence"), "created"), "400": _ERROR, "401": _ERROR, "403": _ERROR},
            },
        },
        "/api/v1/silences/{silence}": {
            "delete": {
                "summary": "Delete a silence made through the API",
                "security": [{"bearer": []}],
                "parameters": [{"name": "silence", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "204": {"description": "deleted"},
                    "401": _ERROR,
                    "403": _ERROR,
                    "404": _ERROR,
                    "409": _ERROR,
                },
            }
        },
    },
}
