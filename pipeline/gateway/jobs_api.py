"""HTTP: submit a Job, read its status and Result; health and Prometheus metrics."""

from __future__ import annotations

import msgspec
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pipeline import telemetry
from pipeline.gateway.deps import GatewayDep, TenantDep
from pipeline.gateway.service import parse_job

router = APIRouter()


def json_response(obj: object, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


@router.post("/v1/jobs")
async def submit_job(request: Request, gw: GatewayDep, tenant: TenantDep) -> Response:
    job = await gw.submit(parse_job(await request.body()), tenant)
    return json_response({"id": job.id, "status": "pending"}, status=202)


@router.get("/v1/jobs/{job_id}")
async def get_job(job_id: str, gw: GatewayDep, tenant: TenantDep) -> Response:
    log = gw.find(job_id, tenant)
    return json_response(
        {
            "id": job_id,
            "status": "pending" if log.result is None else "done",
            "num_events": log.next_seq,
            "result": log.result,
        }
    )


@router.get("/healthz")
async def healthz(gw: GatewayDep) -> Response:
    ok = gw.feed.is_running
    return json_response({"ok": ok, "jobs": len(gw.hub.logs)}, status=200 if ok else 503)


@router.get("/metrics")
async def metrics() -> Response:
    return Response(generate_latest(telemetry.REGISTRY), media_type=CONTENT_TYPE_LATEST)
