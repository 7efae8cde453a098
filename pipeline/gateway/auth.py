"""API keys -> tenants. Keys come from config (STEPWISE_API_KEYS); none configured: auth off and
every caller is tenant `default`."""

from __future__ import annotations

from starlette.requests import HTTPConnection

DEFAULT_TENANT = "default"


class Unauthorized(Exception):
    """No key, or a key this gateway does not know (HTTP 401, WebSocket close 4401)."""


class ApiKeys:
    def __init__(self, keys: dict[str, str]):
        self.keys = dict(keys)

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def tenant_for(self, key: str | None) -> str:
        if not self.enabled:
            return DEFAULT_TENANT
        if key is None or key not in self.keys:
            raise Unauthorized("missing or unknown API key")
        return self.keys[key]

    def may_see(self, tenant: str, owner: str | None) -> bool:
        """A caller sees a job its tenant owns; with auth off, every job."""
        return not self.enabled or owner == tenant


def key_of(conn: HTTPConnection) -> str | None:
    """`Authorization: Bearer <key>`, else the `api_key` query parameter (browsers' WebSocket
    API cannot set headers)."""
    header = conn.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return conn.query_params.get("api_key")
