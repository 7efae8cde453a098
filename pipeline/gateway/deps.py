"""FastAPI dependencies: the Gateway of this app and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from pipeline.gateway.auth import KeysUnavailable, Unauthorized, key_of
from pipeline.gateway.service import Gateway, GatewayError


def get_gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def get_tenant(request: Request) -> str:
    return await resolve_tenant(get_gateway(request), key_of(request))


async def resolve_tenant(gw: Gateway, key: str | None) -> str:
    """The key's tenant; GatewayError 401 for a bad key, 503 when the keys' Redis is down."""
    try:
        return await gw.keys.resolve(key)
    except Unauthorized as exc:
        raise GatewayError(str(exc), code="unauthorized", status=401) from None
    except KeysUnavailable as exc:
        raise GatewayError(str(exc), code="keys_unavailable", status=503) from None


GatewayDep = Annotated[Gateway, Depends(get_gateway)]
TenantDep = Annotated[str, Depends(get_tenant)]
