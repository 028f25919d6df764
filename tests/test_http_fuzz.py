"""schemathesis generates requests from the generated OpenAPI document and sends them to the ASGI app (no socket):
no request may get a 5xx other than the documented 503s, and every response must match its documented schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from lagwatch.daemon import Daemon
from lagwatch.serve.app import create_app
from tests.conftest import wait_for
from tests.serve_fakes import CLUSTER, make_daemon, put_alert

WRITE = "w-fuzz-Token"
MAX_EXAMPLES = 50  # per operation: 11 operations in about 10 s on a busy 2-core machine


# Loaded at import (the document needs no daemon); the daemon behind the app comes with the fixture below.
APP: FastAPI = create_app()
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP)
# Valid requests and invalid ones (wrong types, unknown fields, missing ones): neither may cost a 5xx.
schema.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])


@pytest.fixture(scope="module", autouse=True)
def fuzzed_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = make_daemon(tmp_path_factory.mktemp("fuzz"), http={"enabled": False, "write_token": WRITE}).start()
    wait_for(lambda: daemon.clusters[CLUSTER].last_success is not None, timeout=10, what="data to serve")
    put_alert(daemon, "g1")
    APP.state.service = daemon
    yield daemon
    daemon.stop()


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors_and_responses_match_the_document(case: schemathesis.Case) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {WRITE}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
