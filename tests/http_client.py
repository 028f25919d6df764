"""A tiny HTTP client for the API tests (urllib, loopback only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def call(
    base: str, method: str, path: str, body: Any = None, token: str | None = None, raw: bytes | None = None
) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    if not text:
        return status, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
