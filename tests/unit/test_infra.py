"""The compose stack's files agree with each other and with the code (no Docker engine needed).

docker-compose.yml must validate with `docker-compose config` (the Debian package, installed by
scripts/setup.sh); every worker runs the one image with the services and metrics port it needs;
Prometheus scrapes exactly the ports the workers serve; the Grafana dashboard uses only metric
names pipeline/telemetry/ exports; and the stack is secure by default: host ports on loopback,
Grafana's password and the gateway's keys required (docs/deploy.md, "Secure defaults").
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from pipeline import telemetry
from pipeline.gateway.config import GatewayConfig
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = ROOT / "infra" / "prometheus.yml"
DASHBOARD = ROOT / "infra" / "grafana" / "dashboards" / "stepwise.json"
DATASOURCES = ROOT / "infra" / "grafana" / "provisioning" / "datasources"

WORKERS = ("ingest", "prefill", "decode", "verify", "budget", "gateway")
GPU_WORKERS = ("prefill-gpu", "decode-gpu")
MULTIHOST_WORKERS = ("prefill-mc", "decode-mc")  # the `mooncake` profile (test_compose_multihost)
SERVICES = {"kafka", "redis", "topics", "prometheus", "grafana", *WORKERS, *GPU_WORKERS}
# What `docker-compose config` (and `up`) refuses to run without; STEPWISE_BIND is optional.
REQUIRED_ENV = {"GRAFANA_ADMIN_PASSWORD": "test-only", "STEPWISE_API_KEYS": "sk-test:tenantA"}
PUBLISHED = {"kafka", "gateway", "prometheus", "jaeger", "grafana"}  # services with host ports
METRIC = re.compile(r"\bstepwise_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Dashboard panel title -> metrics its queries must use (the panels issue 7 asks for).
REQUIRED_PANELS = {
    "E2E latency heatmap": ("stepwise_e2e_latency_seconds_bucket",),
    "p95 e2e latency vs SLO": ("stepwise_e2e_latency_seconds_bucket",),
    "Budgets over time": ("stepwise_budget_max_thinking_tokens", "stepwise_budget_max_steps"),
    "Backtracks rate": ("stepwise_backtracks_total",),
    "Step verdict mix": ("stepwise_step_verdicts_total",),
    "KV cache use": ("stepwise_kv_cache_usage_ratio",),
    "Cache hit rate": ("stepwise_cache_hits_total", "stepwise_cache_misses_total"),
    # Issue 33: p95 against the SLO beside the controller's limits and its shed rate.
    "SLO controller: p95 vs SLO, limits, shed rate": (
        "stepwise_e2e_latency_seconds_bucket",
        "stepwise_budget_slo_seconds",
        "stepwise_budget_pressure",
        "stepwise_budget_max_thinking_tokens",
        "stepwise_budget_shed_ratio",
        "stepwise_jobs_shed_total",
    ),
}


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def worker_name(service: dict) -> str | None:
    """`stepwise worker NAME` -> NAME, else None."""
    cmd = service.get("command") or []
    return cmd[2] if cmd[:2] == ["stepwise", "worker"] and len(cmd) == 3 else None


def metrics_ports(service: dict) -> set[int]:
    """Ports a service serves /metrics on: its base port (+ pool index for verify's children),
    or, for the gateway, its API port."""
    env = service.get("environment", {})
    if worker_name(service) == "gateway":
        return {int(env["STEPWISE_GATEWAY_PORT"])}
    base = int(env["STEPWISE_METRICS_PORT"])
    if worker_name(service) == "verify":
        return {base + i for i in range(int(env.get("STEPWISE_VERIFY_CONCURRENCY", "1")))}
    return {base}


def dns_names(name: str, service: dict) -> set[str]:
    names = {name}
    for net in (service.get("networks") or {}).values():
        names.update((net or {}).get("aliases", []))
    return names


def scrape_targets(prom: dict) -> list[tuple[str, str, int]]:
    """(job, host, port) of every static and DNS target in the Prometheus config."""
    out = []
    for job in prom["scrape_configs"]:
        for sc in job.get("static_configs", []):
            for target in sc["targets"]:
                host, _, port = target.rpartition(":")
                out.append((job["job_name"], host, int(port)))
        for sd in job.get("dns_sd_configs", []):
            out.extend((job["job_name"], host, int(sd["port"])) for host in sd["names"])
    return out


def histogram_names() -> set[str]:
    metrics = telemetry.Metrics(CollectorRegistry())
    return {f.name for f in metrics.registry.collect() if f.type == "histogram"}


def unknown_metrics(names: set[str]) -> set[str]:
    """Names that are neither exported nor a histogram's _bucket/_sum/_count series."""
    known = set(telemetry.METRIC_NAMES)
    histograms = histogram_names()
    bad = set()
    for name in names:
        if name in known:
            continue
        base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if base not in histograms or base not in known:
            bad.add(name)
    return bad


def compose_config(*args: str, env: dict[str, str], profile: str | None = None, files=()):
    """`docker-compose config ARGS` with `env` over ours, less the variables the tests set."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail(
            "docker-compose is not on PATH: install it (`apt-get install docker-compose`, which "
            "scripts/setup.sh does as root) so the compose file is validated"
        )
    ours = {k: v for k, v in os.environ.items() if k not in {*REQUIRED_ENV, "STEPWISE_BIND"}}
    argv = [exe, *(a for f in (COMPOSE, *files) for a in ("-f", str(f)))]
    argv += [*(["--profile", profile] if profile else []), "config", *args]
    return subprocess.run(
        argv, cwd=ROOT, env=ours | env, capture_output=True, text=True, timeout=60
    )


def resolved(env: dict[str, str]) -> dict[str, dict]:
    """The services as compose resolves them with `env` (every variable interpolated)."""
    proc = compose_config(env=env)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)["services"]


def host_ips(service: dict) -> list[str]:
    """The host address of each published port (v1 prints `ip:host:container/tcp`, v2 dicts)."""
    ports = service.get("ports", [])
    return [p["host_ip"] if isinstance(p, dict) else str(p).split(":")[0] for p in ports]


def panel_exprs(dashboard: dict) -> dict[str, list[str]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.extend([panel, *panel.get("panels", [])])  # rows may nest panels
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in panels}


# -- (1) docker-compose validates the file -----------------------------------------------------


@pytest.mark.parametrize("profile", [None, "gpu"])
def test_docker_compose_config_validates(profile):
    proc = compose_config("-q", env=REQUIRED_ENV, profile=profile)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("missing", sorted(REQUIRED_ENV))
def test_compose_refuses_to_run_without_each_secret(missing):
    for env in ({}, {missing: ""}):  # unset or empty: no `admin`, no keyless gateway
        others = {k: v for k, v in REQUIRED_ENV.items() if k != missing}
        proc = compose_config("-q", env=others | env)
        assert proc.returncode != 0, f"compose ran without {missing}"
        assert missing in proc.stderr


# -- (1b) secure defaults -------------------------------------------------------------------------


def test_published_ports_bind_loopback_unless_overridden():
    services = resolved(REQUIRED_ENV)
    assert {n for n, s in services.items() if s.get("ports")} == PUBLISHED  # redis: never
    for name in PUBLISHED:
        assert set(host_ips(services[name])) == {"127.0.0.1"}, name
    opened = resolved(REQUIRED_ENV | {"STEPWISE_BIND": "0.0.0.0"})  # on purpose, for all
    for name in PUBLISHED:
        assert set(host_ips(opened[name])) == {"0.0.0.0"}, name


def test_kafka_advertises_its_host_listener_on_loopback(services):
    listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert "HOST://127.0.0.1:9094" in listeners


def test_the_compose_gateway_passes_its_own_secure_start_check():
    # It binds beyond loopback inside its container, so it is the gateway's own refusal that
    # the required keys satisfy: built from its environment as compose resolves it.
    env = resolved(REQUIRED_ENV)["gateway"]["environment"]
    config = GatewayConfig.from_settings(Settings.load(env={k: str(v) for k, v in env.items()}))
    assert (config.host, config.allow_open) == ("0.0.0.0", False)
    assert config.api_keys == {"sk-test": "tenantA"}


def test_an_override_file_runs_the_compose_gateway_open_on_purpose(tmp_path):
    # docs/deploy.md's recipe: the only way to a keyless compose gateway, and it is allowed.
    override = tmp_path / "open.yml"
    gateway_env = {"STEPWISE_API_KEYS": "", "STEPWISE_GATEWAY_ALLOW_OPEN": "1"}
    override.write_text(yaml.safe_dump({"services": {"gateway": {"environment": gateway_env}}}))
    proc = compose_config(env=REQUIRED_ENV, files=(override,))
    assert proc.returncode == 0, proc.stderr
    env = yaml.safe_load(proc.stdout)["services"]["gateway"]["environment"]
    config = GatewayConfig.from_settings(Settings.load(env={k: str(v) for k, v in env.items()}))
    assert (config.api_keys, config.allow_open) == ({}, True)
    assert "OPEN GATEWAY" in config.exposure_warning()


# -- (2) the services ----------------------------------------------------------------------------


def test_expected_services_exist(services):
    assert set(services) >= SERVICES, sorted(SERVICES - set(services))


def test_every_worker_runs_the_one_image_with_its_services(services):
    workers = {n: s for n, s in services.items() if worker_name(s)}
    assert set(workers) == {*WORKERS, *GPU_WORKERS, *MULTIHOST_WORKERS}
    cpu = {n: s for n, s in workers.items() if n in WORKERS}
    cpu_builds = {json.dumps(s["build"], sort_keys=True) for s in cpu.values()}
    assert len(cpu_builds) == 1, "the CPU workers must share one build"
    assert {s["image"] for s in cpu.values()} == {"stepwise:cpu"}
    for name, s in workers.items():
        assert s["build"]["dockerfile"] == "infra/Dockerfile", name
        assert s["build"]["context"] == ".", name
        env = s["environment"]
        assert env["STEPWISE_KAFKA"] == "kafka:9092", name
        assert env["STEPWISE_REDIS"] == "redis://redis:6379/0", name
        # Prometheus scrapes over the stack's network; the default (loopback) would hide it.
        assert env["STEPWISE_METRICS_ADDR"] == "0.0.0.0", name
        assert all(p > 0 for p in metrics_ports(s)), name
        if name in WORKERS:
            assert worker_name(s) == name
    # Two CPU workers never share a metrics port (Prometheus tells them apart by job anyway).
    ports = [p for n in WORKERS for p in metrics_ports(services[n])]
    assert len(ports) == len(set(ports))


def test_workers_wait_for_kafka_redis_and_topics(services):
    for name in WORKERS:
        deps = services[name]["depends_on"]
        assert deps["kafka"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["topics"]["condition"] == "service_completed_successfully", name
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_kafka_is_one_kraft_broker_reachable_as_kafka_9092(services):
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert "healthcheck" in kafka and "healthcheck" in services["redis"]


def test_prefill_and_decode_share_shared_memory(services):
    # The KV handoff is POSIX shm: decode must see prefill's /dev/shm.
    assert services["prefill"]["ipc"] == "shareable"
    assert services["decode"]["ipc"] == "service:prefill"
    assert services["decode-gpu"]["ipc"] == "service:prefill-gpu"


def test_gpu_profile(services):
    for name in GPU_WORKERS:
        s = services[name]
        assert s["profiles"] == ["gpu"]
        assert s["environment"]["STEPWISE_DTYPE"] == "bfloat16"
        devices = s["deploy"]["resources"]["reservations"]["devices"]
        assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    for name in WORKERS:
        assert "profiles" not in services[name], f"{name} must run by default (CPU)"


def test_published_ports_and_mounts(services):
    def published(name: str) -> set[str]:
        return {str(p).split(":")[-2] for p in services[name].get("ports", [])}

    assert "8000" in published("gateway")
    assert "3000" in published("grafana")
    assert "9090" in published("prometheus")
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            assert (ROOT / source).exists(), f"{name} mounts missing {source}"
    grafana_env = services["grafana"]["environment"]
    assert grafana_env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana_env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


def test_dockerfile_installs_cpu_torch_first_and_runs_unprivileged():
    text = (ROOT / "infra" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert "download.pytorch.org/whl/cpu" in text
    assert text.index("torch==") < text.index('pip install ".')
    assert re.search(r"^USER (?!root)\S+", text, re.M)
    for copied in re.findall(r"^COPY (\S+) ", text, re.M):
        assert (ROOT / copied).exists(), copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv*", "bench"} <= set(ignored)


def test_create_topics_needs_a_broker_address(monkeypatch):
    spec = importlib.util.spec_from_file_location("create_topics", ROOT / "infra/create_topics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("STEPWISE_KAFKA", raising=False)
    assert asyncio.run(module.main(deadline_s=0)) == 2


# -- (3) metric names ----------------------------------------------------------------------------


def test_dashboard_and_prometheus_use_only_exported_metrics(dashboard):
    exprs = [e for es in panel_exprs(dashboard).values() for e in es]
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used, "the dashboard queries no stepwise_ metric"
    assert not unknown_metrics(used), sorted(unknown_metrics(used))
    in_prometheus = set(METRIC.findall(PROMETHEUS.read_text()))
    assert not unknown_metrics(in_prometheus), sorted(unknown_metrics(in_prometheus))


def test_unknown_metric_names_are_caught():
    assert unknown_metrics({"stepwise_e2e_latency_seconds_bucket"}) == set()
    assert unknown_metrics({"stepwise_jobs_total_bucket", "stepwise_nope"}) == {
        "stepwise_jobs_total_bucket",
        "stepwise_nope",
    }


# -- (4) scrape targets match the workers' ports -------------------------------------------------


def test_every_scrape_target_is_a_worker_metrics_port(services):
    targets = scrape_targets(load_yaml(PROMETHEUS))
    assert targets
    for job, host, port in targets:
        owners = {n: s for n, s in services.items() if worker_name(s) and host in dns_names(n, s)}
        assert owners, f"{job}: {host} is no worker service"
        for name, s in owners.items():
            assert port in metrics_ports(s), f"{job}: {host}:{port} is not {name}'s metrics port"
            assert job == worker_name(s), f"{job}: scrapes {name}"


def test_every_worker_metrics_port_is_scraped(services):
    scraped = {(host, port) for _, host, port in scrape_targets(load_yaml(PROMETHEUS))}
    for name in WORKERS:
        for port in metrics_ports(services[name]):
            assert (name, port) in scraped, f"{name}:{port} is not scraped"


# -- (5) the dashboard ---------------------------------------------------------------------------


def test_dashboard_has_the_panels_on_the_provisioned_datasource(dashboard):
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    uids = {
        ds["uid"]
        for path in DATASOURCES.glob("*.yml")
        for ds in load_yaml(path)["datasources"]
        if ds["type"] == "prometheus"
    }
    assert len(uids) == 1
    exprs = panel_exprs(dashboard)
    for title, metrics in REQUIRED_PANELS.items():
        assert title in exprs, f"missing panel {title!r}"
        joined = "\n".join(exprs[title])
        for metric in metrics:
            assert metric in joined, f"{title!r} does not query {metric}"
    assert "histogram_quantile(0.95" in "".join(exprs["p95 e2e latency vs SLO"])
    # The SLO line is each class's as the controller holds it, not a constant.
    assert "max by (slo_class) (stepwise_budget_slo_seconds)" in exprs["p95 e2e latency vs SLO"]
    assert "by (verdict)" in exprs["Step verdict mix"][0]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids, panel["title"]
    heatmap = next(p for p in dashboard["panels"] if p["title"] == "E2E latency heatmap")
    assert heatmap["type"] == "heatmap" and heatmap["targets"][0]["format"] == "heatmap"
