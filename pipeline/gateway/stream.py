"""WebSocket `/v1/stream`: submit or subscribe, then every Event in seq order, then the Result.

Close codes: 1000 done; 4008 slow consumer; 4400 bad request; 4401 bad key; 4404 unknown job;
4409/4429/4503 as HTTP 409/429/503; 4410 the asked `from_seq` is no longer kept.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from pipeline import schema
from pipeline.gateway.auth import key_of
from pipeline.gateway.deps import resolve_tenant
from pipeline.gateway.hub import EventsUnavailable, SlowConsumer, Subscription
from pipeline.gateway.service import Gateway, GatewayError, parse_job

router = APIRouter()
SLOW_CONSUMER = 4008
CLOSE_TIMEOUT_S = 2.0


class _Request(msgspec.Struct):
    submit: msgspec.Raw = msgspec.Raw(b"")  # empty: absent
    subscribe: str | None = None
    from_seq: int = 0


def result_json(result: schema.Result) -> bytes:
    return msgspec.json.encode({"kind": "result", **msgspec.to_builtins(result)})


async def send(ws: WebSocket, data: bytes) -> None:
    await ws.send_text(data.decode())


async def _first_message(ws: WebSocket) -> bytes:
    msg = await ws.receive()
    if msg["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(msg.get("code", 1000))
    return msg.get("bytes") or (msg.get("text") or "").encode()


async def _open(ws: WebSocket, gw: Gateway, tenant: str) -> Subscription:
    try:
        req = msgspec.json.decode(await _first_message(ws), type=_Request)
    except msgspec.DecodeError as exc:
        raise GatewayError(f"bad request: {exc}", code="bad_request", status=400) from None
    if req.submit:
        return await gw.submit_and_follow(parse_job(bytes(req.submit)), tenant)
    if req.subscribe is not None:
        if req.from_seq < 0:
            raise GatewayError("from_seq must be >= 0", code="bad_request", status=400)
        try:
            return gw.subscribe(req.subscribe, tenant, req.from_seq)
        except EventsUnavailable as exc:
            raise GatewayError(str(exc), code="events_unavailable", status=410) from None
    raise GatewayError('send {"submit": Job} or {"subscribe": id}', code="bad_request", status=400)


async def _pump(ws: WebSocket, sub: Subscription, grace_s: float) -> None:
    async for item in sub.items(grace_s):
        if isinstance(item, schema.Result):
            await send(ws, result_json(item))
        else:
            await send(ws, schema.encode_json(item))


async def _close(ws: WebSocket, code: int, reason: str = "") -> None:
    with contextlib.suppress(Exception):  # the peer may be gone or not reading
        await asyncio.wait_for(ws.close(code, reason[:120]), CLOSE_TIMEOUT_S)


@router.websocket("/v1/stream")
async def stream(ws: WebSocket) -> None:
    gw: Gateway = ws.app.state.gateway
    await ws.accept()
    sub: Subscription | None = None
    try:
        tenant = await resolve_tenant(gw, key_of(ws))
        sub = await _open(ws, gw, tenant)
        pump = asyncio.create_task(_pump(ws, sub, gw.config.final_grace_s))
        dropped = asyncio.create_task(sub.dropped.wait())
        await asyncio.wait({pump, dropped}, return_when=asyncio.FIRST_COMPLETED)
        if not pump.done():  # a send blocked on a client that stopped reading
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            raise SlowConsumer(f"more than {sub.max_queue} events behind")
        dropped.cancel()
        pump.result()
        await _close(ws, 1000)
    except GatewayError as exc:
        with contextlib.suppress(Exception):
            await send(ws, msgspec.json.encode(exc.body()))
        await _close(ws, 4000 + exc.status, exc.code)
    except SlowConsumer as exc:
        await _close(ws, SLOW_CONSUMER, f"slow consumer: {exc}")
    except WebSocketDisconnect:
        pass
    finally:
        if sub is not None:
            gw.hub.unsubscribe(sub)
