import re
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from pipeline import schema, telemetry
from pipeline.budget import SloClassConfig, limits_at
from pipeline.telemetry import METRIC_NAMES, Metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"
NAME = re.compile(r"^stepwise_[a-z][a-z0-9]*(_[a-z0-9]+)*$")


@pytest.fixture
def m() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
def server():
    yield telemetry.start_metrics_server
    telemetry.stop_metrics_servers()


def value(m: Metrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def ok_result(**kw) -> schema.Result:
    base = dict(
        id="job-1",
        status="ok",
        tenant="acme",
        slo_class="interactive",
        answer="4",
        steps=[
            schema.StepRecord(text="2+2=4", verdict="entailed"),
            schema.StepRecord(text="so 4", verdict="consistent"),
            schema.StepRecord(text="x", verdict="entailed"),
        ],
        usage=schema.Usage(
            prompt_tokens=20, completion_tokens=40, probe_tokens=6, wasted_tokens=9,
            steps=3, backtracks=2,
        ),
        timings=schema.Timings(
            queue_ms=4.0, ttft_ms=120.0, e2e_ms=2400.0,
            stages={"prefill": 30.0, "decode": 2200.0, "someday": 5.0},
        ),
        budget=schema.BudgetReport(max_thinking_tokens=512, used=49, stop_reason="answer"),
        ts_ms=1,
    )  # fmt: skip
    base.update(kw)
    return schema.Result(**base)


def exercise(m: Metrics) -> None:
    """One call of every helper, so every series has a sample."""
    m.observe_result(ok_result())
    m.observe_step(12)
    m.observe_stage("ingest", 0.002)
    m.add_generated_tokens(5)
    m.add_forwards(4, drafts=1, draft_tokens=3, accepted_tokens=1)
    m.set_lag("prefill", 3)
    m.set_kv_usage(30, 120)
    m.set_inflight(7)
    m.cache_hit("answer", "l2")
    m.cache_miss("step")
    m.set_budget(
        "batch", SimpleNamespace(max_thinking_tokens=256, max_steps=16, probe_effort=2, version=3)
    )
    m.set_controller("interactive", limits_at(SloClassConfig(), 3.5), 1.2)
    m.job_shed("interactive", "gateway")
    m.add_deadline_cuts("interactive", 2)
    m.set_decode_pace(9.5, 12, 64)
    m.verify_check("contradicted", 0.003)
    m.observe_call("decode@h:1", "verify@h:2", 0.004, error=True, retries=1)
    m.observe_kv_import("mooncake", "imported", 0.012)
    m.set_worker_info("decode", "tiny-reasoner")


def test_the_controllers_actuators_and_its_reading_are_exported(m):
    limits = limits_at(SloClassConfig(slo_p95_ms=15_000), 4.5)  # thinking at its floor, shedding
    m.set_controller("interactive", limits, 1.4)
    assert value(m, "stepwise_budget_resample_cap", slo_class="interactive") == 0
    assert value(m, "stepwise_budget_early_exit", slo_class="interactive") == 1
    assert value(m, "stepwise_budget_shed_ratio", slo_class="interactive") == limits.shed > 0
    assert value(m, "stepwise_budget_pressure", slo_class="interactive") == 4.5
    assert value(m, "stepwise_budget_slo_seconds", slo_class="interactive") == 15
    assert value(m, "stepwise_budget_predicted_latency_ratio", slo_class="interactive") == 1.4
    m.set_controller("batch", limits_at(SloClassConfig(), 0.0), None)
    assert value(m, "stepwise_budget_resample_cap", slo_class="batch") == -1  # no cap
    m.job_shed("interactive")
    m.job_shed("interactive", "gateway")
    assert value(m, "stepwise_jobs_shed_total", slo_class="interactive", stage="ingest") == 1
    with pytest.raises(ValueError):
        m.job_shed("gold")


def test_kv_imports_count_by_transport_and_outcome(m):
    m.observe_kv_import("mooncake", "imported", 0.012)
    m.observe_kv_import("mooncake", "reprefill", 2.0)
    m.observe_kv_import("none", "reprefill", 0.0)
    m.observe_kv_import("carrier-pigeon", "imported", 0.5)  # from the wire: "other"
    assert value(m, "stepwise_kv_imports_total", transport="mooncake", outcome="reprefill") == 1
    assert value(m, "stepwise_kv_imports_total", transport="none", outcome="reprefill") == 1
    assert value(m, "stepwise_kv_imports_total", transport="other", outcome="imported") == 1
    assert value(m, "stepwise_kv_import_seconds_count", transport="mooncake") == 2
    assert value(m, "stepwise_kv_imports_total", transport="shm_pool", outcome="imported") == 0
    with pytest.raises(ValueError):
        m.observe_kv_import("shm_pool", "lost", 0.1)


def test_a_traced_call_is_an_edge_with_its_latency_errors_and_retries(m):
    m.observe_call("decode@h:1", "verify@h:2", 0.3)
    m.observe_call("decode@h:1", "verify@h:2", 0.02, error=True, retries=2)
    edge = {"source": "decode@h:1", "target": "verify@h:2"}
    assert value(m, "stepwise_trace_call_seconds_count", **edge) == 2
    assert value(m, "stepwise_trace_call_seconds_bucket", le="0.025", **edge) == 1
    assert value(m, "stepwise_trace_call_errors_total", **edge) == 1
    assert value(m, "stepwise_trace_call_retries_total", **edge) == 2
    # A call without errors still has the edge's error series, at 0: its rate exists.
    m.observe_call("ingest@h:0", "prefill@h:3", 0.01)
    healthy = {"source": "ingest@h:0", "target": "prefill@h:3"}
    assert value(m, "stepwise_trace_call_errors_total", **healthy) == 0


# -- observe_result ----------------------------------------------------------------------------


def test_ok_result_records_timings_usage_verdicts_and_status(m):
    m.observe_result(ok_result())
    s = {"slo_class": "interactive"}
    assert (
        value(m, "stepwise_jobs_total", stage="decode", status="ok", stop_reason="answer", **s) == 1
    )
    assert value(m, "stepwise_ttft_seconds_count", **s) == 1
    assert value(m, "stepwise_ttft_seconds_sum", **s) == pytest.approx(0.12)
    assert value(m, "stepwise_e2e_latency_seconds_sum", **s) == pytest.approx(2.4)
    assert value(m, "stepwise_e2e_latency_seconds_bucket", le="2.5", **s) == 1
    assert value(m, "stepwise_e2e_latency_seconds_bucket", le="1.5", **s) == 0
    assert value(m, "stepwise_stage_latency_seconds_sum", stage="queue") == pytest.approx(0.004)
    assert value(m, "stepwise_stage_latency_seconds_sum", stage="prefill") == pytest.approx(0.03)
    assert value(m, "stepwise_stage_latency_seconds_sum", stage="decode") == pytest.approx(2.2)
    assert (
        m.registry.get_sample_value("stepwise_stage_latency_seconds_count", {"stage": "someday"})
        is None
    )
    assert value(m, "stepwise_job_steps_sum", **s) == 3
    assert value(m, "stepwise_job_steps_bucket", le="3.0", **s) == 1
    assert value(m, "stepwise_backtracks_total", **s) == 2
    assert value(m, "stepwise_wasted_tokens_total", **s) == 9
    assert value(m, "stepwise_probe_tokens_total", **s) == 6
    assert value(m, "stepwise_prompt_tokens_total", **s) == 20
    assert value(m, "stepwise_completion_tokens_total", **s) == 40
    assert value(m, "stepwise_step_verdicts_total", verdict="entailed") == 2
    assert value(m, "stepwise_step_verdicts_total", verdict="consistent") == 1
    assert value(m, "stepwise_step_verdicts_total", verdict="contradicted") == 0


def test_rejected_result_counts_the_job_and_no_work(m):
    err = schema.SchemaError("bad", code=schema.BAD_ID)
    m.observe_result(schema.rejected_result("j", err, tenant="acme"), stage="ingest")
    labels = dict(stage="ingest", status="rejected", stop_reason="error", slo_class="interactive")
    assert value(m, "stepwise_jobs_total", **labels) == 1
    assert value(m, "stepwise_e2e_latency_seconds_count", slo_class="interactive") == 0
    assert value(m, "stepwise_job_steps_count", slo_class="interactive") == 0
    assert value(m, "stepwise_backtracks_total", slo_class="interactive") == 0


def test_cached_result_counts_latency_but_not_the_original_work(m):
    cached = ok_result(
        status="cached", slo_class="batch", timings=schema.Timings(e2e_ms=8.0, ttft_ms=8.0)
    )
    m.observe_result(cached, stage="ingest")
    s = {"slo_class": "batch"}
    labels = dict(stage="ingest", status="cached", stop_reason="answer", **s)
    assert value(m, "stepwise_jobs_total", **labels) == 1
    assert value(m, "stepwise_e2e_latency_seconds_bucket", le="0.01", **s) == 1
    assert value(m, "stepwise_backtracks_total", **s) == 0
    assert value(m, "stepwise_wasted_tokens_total", **s) == 0
    assert value(m, "stepwise_job_steps_count", **s) == 0
    assert value(m, "stepwise_step_verdicts_total", verdict="entailed") == 0


def test_budget_stop_reason_and_slo_class_are_labels(m):
    m.observe_result(ok_result(slo_class="batch", budget=schema.BudgetReport(stop_reason="budget")))
    labels = dict(stage="decode", status="ok", stop_reason="budget", slo_class="batch")
    assert value(m, "stepwise_jobs_total", **labels) == 1
    assert value(m, "stepwise_ttft_seconds_count", slo_class="interactive") == 0


# -- the other helpers -------------------------------------------------------------------------


def test_speculative_counters_and_their_ratios(m):
    m.add_generated_tokens(10)
    m.add_forwards(4, drafts=3, draft_tokens=9, accepted_tokens=6)
    assert value(m, "stepwise_spec_decode_num_drafts_total", stage="decode") == 3
    assert value(m, "stepwise_spec_decode_num_draft_tokens_total", stage="decode") == 9
    assert value(m, "stepwise_spec_decode_num_accepted_tokens_total", stage="decode") == 6
    assert value(m, "stepwise_spec_decode_acceptance_ratio", stage="decode") == pytest.approx(2 / 3)
    assert value(m, "stepwise_engine_tokens_per_forward", stage="decode") == pytest.approx(2.5)
    m.add_generated_tokens(2)  # a tick with no proposal: the ratios follow the totals
    m.add_forwards(2)
    assert value(m, "stepwise_spec_decode_acceptance_ratio", stage="decode") == pytest.approx(2 / 3)
    assert value(m, "stepwise_engine_tokens_per_forward", stage="decode") == pytest.approx(2.0)


def test_gauges_and_counters_of_the_helpers(m):
    exercise(m)
    assert value(m, "stepwise_step_tokens_bucket", le="16.0") == 1
    assert value(m, "stepwise_step_tokens_bucket", le="8.0") == 0
    assert value(m, "stepwise_stage_latency_seconds_count", stage="ingest") == 1
    assert value(m, "stepwise_engine_generated_tokens_total", stage="decode") == 5
    assert value(m, "stepwise_engine_forwards_total", stage="decode") == 4
    assert value(m, "stepwise_consumer_lag_messages", stage="prefill") == 3
    assert value(m, "stepwise_kv_cache_used_blocks", stage="decode") == 30
    assert value(m, "stepwise_kv_cache_capacity_blocks", stage="decode") == 120
    assert value(m, "stepwise_kv_cache_usage_ratio", stage="decode") == pytest.approx(0.25)
    assert value(m, "stepwise_inflight_sequences", stage="decode") == 7
    assert value(m, "stepwise_cache_hits_total", level="answer", layer="l2") == 1
    assert value(m, "stepwise_cache_hits_total", level="answer", layer="l1") == 0
    assert value(m, "stepwise_cache_misses_total", level="step") == 1
    assert value(m, "stepwise_budget_max_thinking_tokens", slo_class="batch") == 256
    assert value(m, "stepwise_budget_max_steps", slo_class="batch") == 16
    assert value(m, "stepwise_budget_probe_effort", slo_class="batch") == 2
    assert value(m, "stepwise_verify_checks_total", verdict="contradicted") == 1
    assert value(m, "stepwise_verify_check_duration_seconds_sum") == pytest.approx(0.003)
    assert value(m, "stepwise_worker_info", stage="decode", model="tiny-reasoner") == 1


def test_set_budget_takes_a_schema_budget_and_its_version(m):
    m.set_budget("interactive", schema.Budget(max_steps=8, max_thinking_tokens=128, version=5))
    assert value(m, "stepwise_budget_version", slo_class="interactive") == 5
    assert value(m, "stepwise_budget_max_steps", slo_class="interactive") == 8
    assert value(m, "stepwise_budget_probe_effort", slo_class="interactive") == 1  # default


def test_empty_kv_pool_is_zero_usage(m):
    m.set_kv_usage(0, 0, stage="prefill")
    assert value(m, "stepwise_kv_cache_usage_ratio", stage="prefill") == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.set_lag("job-123", 1),
        lambda m: m.cache_hit("tenant-acme"),
        lambda m: m.cache_hit("answer", "l3"),
        lambda m: m.cache_miss("everything"),
        lambda m: m.set_budget("premium", SimpleNamespace(max_steps=1)),
        lambda m: m.verify_check("maybe", 0.1),
        lambda m: m.observe_stage("gpu", 0.1),
        lambda m: m.observe_result(ok_result(), stage="gateway-7"),
    ],
)
def test_label_values_outside_their_set_are_refused(m, call):
    with pytest.raises(ValueError):
        call(m)


# -- conventions -------------------------------------------------------------------------------


def test_metric_names_match_the_code_and_the_docs(m):
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES)
    assert set(telemetry.metric_names(m)) == set(METRIC_NAMES)
    docs = DOCS.read_text()
    assert [n for n in METRIC_NAMES if f"`{n}`" not in docs] == []


def test_names_units_and_types_follow_prometheus_conventions(m):
    for family in m.registry.collect():
        name = family.name
        assert NAME.match(name), name
        assert not name.endswith("_total"), name  # the client adds it to counters only
        if family.type == "histogram":  # time in seconds, or a count of tokens or steps
            assert name.endswith(("_seconds", "_tokens", "_steps", "_ratio")), name
        if "time" in family.documentation.lower():
            assert name.endswith("_seconds"), name
        if name.endswith(("_seconds", "_ratio")):
            assert family.type in ("histogram", "gauge"), name
        assert not re.search(r"_(ms|milliseconds|percent|count|sum|bucket)$", name), name
    for name in METRIC_NAMES:  # as exposed: `_total` on counters and nowhere else
        assert name.endswith("_total") == (_type(m, name) == "counter"), name


def _type(m: Metrics, exposed: str) -> str:
    for family in m.registry.collect():
        if exposed in (family.name, family.name + "_total", family.name + "_info"):
            return family.type
    raise KeyError(exposed)


def test_no_label_can_hold_a_job_id_or_a_tenant(m):
    exercise(m)
    m.observe_result(ok_result(id="job-unique-42", tenant="tenant-unique"))
    for family in m.registry.collect():
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= telemetry.ALLOWED_LABELS, sample
            assert "job-unique-42" not in sample.labels.values()
            assert "tenant-unique" not in sample.labels.values()


# -- serving -----------------------------------------------------------------------------------


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_scrape_of_the_default_registry_shows_every_name(server):
    port = server(0, addr="127.0.0.1")
    assert port > 0
    text = scrape(port)
    assert [n for n in METRIC_NAMES if n not in text] == []
    assert "process_cpu_seconds_total" in text


def test_scrape_has_a_sample_of_every_metric_once_each_helper_ran(m, server):
    exercise(m)
    text = scrape(server(0, addr="127.0.0.1", registry=m.registry))
    exposed = set()
    for family in text_string_to_metric_families(text):
        exposed.update(s.name for s in family.samples)
    for name in METRIC_NAMES:
        assert name in exposed or f"{name}_count" in exposed, name


def test_metrics_port(monkeypatch):
    monkeypatch.delenv(telemetry.METRICS_PORT_ENV, raising=False)
    assert telemetry.metrics_port(offset=3) == 0
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "9400")
    assert telemetry.metrics_port() == 9400
    assert telemetry.metrics_port(offset=2) == 9402
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "-1")
    assert telemetry.metrics_port(offset=2) == telemetry.DISABLED
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "-5")
    with pytest.raises(ValueError):
        telemetry.metrics_port()


def test_values_off_the_wire_outside_their_set_become_other(m):
    # Structs built in code are not validated: a bad value must not grow a series or raise.
    odd = ok_result(
        status="weird", slo_class="gold", steps=[schema.StepRecord(text="x", verdict="meh")]
    )
    odd.budget.stop_reason = "bored"
    m.observe_result(odd)
    labels = dict(stage="decode", status="other", stop_reason="other", slo_class="other")
    assert value(m, "stepwise_jobs_total", **labels) == 1
    assert value(m, "stepwise_step_verdicts_total", verdict="other") == 1


def test_pool_child_serves_on_base_port_plus_its_index(monkeypatch):
    ports = []
    monkeypatch.setattr(telemetry.serve, "current_process", lambda: SimpleNamespace(index=2))
    monkeypatch.setattr(
        telemetry.serve, "start_metrics_server", lambda port, addr: ports.append(port) or port
    )
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "9110")
    telemetry.serve_pool_child_metrics(sender=None)
    assert ports == [9112]


def test_serve_metrics_follows_the_env(monkeypatch, server):
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "-1")
    assert telemetry.serve_metrics("ingest", "tiny-reasoner") == telemetry.DISABLED
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "0")
    monkeypatch.setenv(telemetry.METRICS_ADDR_ENV, "127.0.0.1")
    port = telemetry.serve_metrics("ingest", "tiny-reasoner")
    assert 'stepwise_worker_info{model="tiny-reasoner",stage="ingest"} 1.0' in scrape(port)


def test_metrics_bind_loopback_unless_told(monkeypatch, server):
    """/metrics has no authentication: a worker serves it on every interface only when
    STEPWISE_METRICS_ADDR says so (compose does, inside its network)."""
    monkeypatch.setenv(telemetry.METRICS_PORT_ENV, "0")
    monkeypatch.delenv(telemetry.METRICS_ADDR_ENV, raising=False)
    telemetry.serve_metrics("ingest", "tiny-reasoner")
    from pipeline.telemetry.serve import _servers

    assert _servers[-1][0].server_address[0] == "127.0.0.1"
    monkeypatch.setenv(telemetry.METRICS_ADDR_ENV, "0.0.0.0")
    telemetry.serve_metrics("ingest", "tiny-reasoner")
    assert _servers[-1][0].server_address[0] == "0.0.0.0"


def test_what_verification_covered_is_counted(m):
    report = schema.VerificationReport(
        status="partial", checks=3, claims=5, entailed=3, contradicted=1, unreadable=1,
        steps=4, steps_checkable=2, checkable_share=0.5,
    )  # fmt: skip
    m.observe_result(schema.Result(id="j", status="ok", verification=report, ts_ms=1))
    assert value(m, "stepwise_claims_total", verdict="entailed") == 3
    assert value(m, "stepwise_claims_total", verdict="contradicted") == 1
    assert value(m, "stepwise_claims_total", verdict="unreadable") == 1
    assert value(m, "stepwise_claims_total", verdict="consistent") == 0
    assert value(m, "stepwise_job_verification_total", status="partial") == 1
    assert value(m, "stepwise_job_verification_total", status="verified") == 0
    assert value(m, "stepwise_job_checkable_ratio_sum") == 0.5
