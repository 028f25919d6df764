"""The HTTP side's settings: the exporter and the JSON API on one port."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HttpConfig(_Strict):
    """The exporter and the JSON API share one port."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9308, ge=0, le=65535)  # 0: any free port (tests)
    # Bearer token for the write endpoints (silences); without one, they are disabled.
    write_token: SecretStr | None = None
    # Bearer token for the read endpoints of the API (/api/v1/...); without one, reads are open.
    read_token: SecretStr | None = None
    # Open connections at most (and never more than half the open-files limit); over it, the oldest idle or
    # slow one is closed for the newcomer.
    max_connections: int = Field(default=1024, ge=1, le=65536)
    # A request (line, headers, body) must arrive whole within this of the connection opening or of the previous
    # response, else the connection is closed: idle and slowloris connections cannot pile up.
    request_read_timeout_s: float = Field(default=10.0, gt=0, le=300)
