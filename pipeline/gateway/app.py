"""The FastAPI app: routes, error bodies, and a lifespan that runs the Gateway (producer, feed)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse

from pipeline.gateway import jobs_api, openai_api, stream
from pipeline.gateway.config import GatewayConfig
from pipeline.gateway.service import Gateway, GatewayError

PAGE = Path(__file__).with_name("page.html")


def create_app(config: GatewayConfig | None = None) -> FastAPI:
    """The gateway app; `config` defaults to the process's settings' (pipeline/settings.py)."""
    if config is None:
        config = GatewayConfig.from_settings()
    gateway = Gateway(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(title="Stepwise gateway", lifespan=lifespan)
    app.state.gateway = gateway

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = first.get("msg", "invalid request")
        error = GatewayError(message, code="invalid_request_error", status=400, field=field)
        return JSONResponse(error.body(), status_code=400)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text()

    app.include_router(jobs_api.router)
    app.include_router(stream.router)
    app.include_router(openai_api.router)
    return app
