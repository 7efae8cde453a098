"""Overload at the gateway (issue 33): a job the budget controller's live limits refuse is a
429 `overloaded` with `Retry-After` before it is published, decided as ingest decides it (by the
job id); an `overloaded` error Result met later is a 429 too. No broker, no Redis."""

from __future__ import annotations

import pytest

from pipeline import schema
from pipeline.budget import SloClassConfig, limits_at
from pipeline.budget.admission import admission_draw, check_admission
from pipeline.errors import OverloadedError
from pipeline.gateway.config import GatewayConfig
from pipeline.gateway.service import Gateway, GatewayError, result_error

SHEDDING = limits_at(SloClassConfig(slo_p95_ms=20_000), 4.6, retry_after_s=7.3).to_budget()


class Limits:
    """Stands in for the gateway's BudgetReader: `cached(slo_class)`."""

    def __init__(self, live: dict[str, schema.Budget]) -> None:
        self.live = live

    def cached(self, slo_class: str) -> schema.Budget | None:
        return self.live.get(slo_class)


def job(i: int, slo_class: str = "interactive") -> schema.Job:
    return schema.Job(id=f"j-{i}", prompt="What is 2 + 2?", slo=schema.SLO(class_=slo_class))


def test_the_draw_is_the_jobs_own_and_spread_evenly():
    draws = [admission_draw(f"j-{i}") for i in range(4000)]
    assert draws == [admission_draw(f"j-{i}") for i in range(4000)]  # replicas agree
    assert all(0 <= d < 1 for d in draws)
    assert abs(sum(d < 0.3 for d in draws) / len(draws) - 0.3) < 0.03


def test_a_share_of_jobs_is_refused_with_a_retry_after():
    refused = []
    for i in range(400):
        try:
            check_admission(f"j-{i}", "interactive", SHEDDING)
        except OverloadedError as e:
            refused.append(e)
    assert abs(len(refused) / 400 - SHEDDING.shed) < 0.08
    assert all(e.code == "overloaded" and e.retry_after_s == 8.0 for e in refused)
    check_admission("j-0", "interactive", None)  # no controller: every job is admitted
    rest = limits_at(SloClassConfig(), 3.9).to_budget()
    for i in range(100):
        check_admission(f"j-{i}", "interactive", rest)  # thinking cut, nobody refused


def test_the_gateway_refuses_before_publishing():
    gw = Gateway(GatewayConfig())
    gw.budgets = Limits({"interactive": SHEDDING})  # type: ignore[assignment]
    statuses = []
    for i in range(200):
        try:
            gw.check_load(job(i))
            statuses.append(200)
        except GatewayError as e:
            statuses.append(e.status)
            assert e.code == "overloaded" and e.headers() == {"Retry-After": "8"}
            assert e.body()["error"]["type"] == "rate_limit_error"
    assert 0 < statuses.count(429) < 200
    for i in range(50):  # the batch class has no shed share here
        gw.check_load(job(i, "batch"))


@pytest.mark.parametrize(
    ("status", "code", "http"),
    [("error", "overloaded", 429), ("rejected", "invalid_field", 400), ("error", "internal", 500)],
)
def test_an_error_result_maps_to_its_http_status(status, code, http):
    err = schema.ErrorInfo(code=code, message="no", retry_after_s=3.2 if http == 429 else None)
    r = schema.Result(id="x", status=status, error=err, ts_ms=1)
    e = result_error(r)
    assert e.status == http and e.code == code
    assert (e.headers() or {}).get("Retry-After") == ("4" if http == 429 else None)
