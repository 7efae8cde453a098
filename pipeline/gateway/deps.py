"""FastAPI dependencies: the Gateway of this app and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from pipeline.gateway.auth import Unauthorized, key_of
from pipeline.gateway.service import Gateway, GatewayError


def get_gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def get_tenant(request: Request) -> str:
    try:
        return get_gateway(request).keys.tenant_for(key_of(request))
    except Unauthorized as exc:
        raise GatewayError(str(exc), code="unauthorized", status=401) from None


GatewayDep = Annotated[Gateway, Depends(get_gateway)]
TenantDep = Annotated[str, Depends(get_tenant)]
