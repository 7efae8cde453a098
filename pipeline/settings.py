"""Every `STEPWISE_*` setting, read in one place: this module is the only reader of them.

A process builds one `Settings` at the CLI (flags, then the environment, then the defaults
below), installs it (`install`), and passes the concern configs it builds down
(`settings.pipeline()`, `.gateway()`, `.budget()`); the few process-wide switches deep in the
engine (kernels, CUDA graphs, the models folder, GC freezing) ask `current()`, which is the
installed object, or one built from the environment on first use by a library caller (a bench,
a test) that has no CLI. `stepwise config` prints the effective values and where each came
from; a `STEPWISE_*` variable nobody knows is reported at start-up (a typo that would otherwise
be ignored in silence).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.config import PipelineConfig

PREFIX = "STEPWISE_"
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(raw: str) -> bool:
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


KIND_NAMES = {int: "an integer", float: "a number", _bool: "a boolean"}


@dataclass(frozen=True, slots=True)
class Var:
    """One setting: `STEPWISE_<name>`, its default (as written in the environment), its type."""

    name: str
    default: str
    concern: str
    help: str
    kind: Callable[[str], object] = str
    choices: tuple[str, ...] = ()
    secret: bool = False  # `stepwise config` shows that it is set, not its value

    @property
    def env(self) -> str:
        return PREFIX + self.name

    def parse(self, raw: str) -> object:
        """The typed value; a bad one is a ValueError that names the variable."""
        if self.choices and raw.strip().lower() not in self.choices:
            raise ValueError(f"{self.env}={raw!r}: expected one of {', '.join(self.choices)}")
        try:
            return self.kind(raw.strip().lower() if self.choices else raw)
        except ValueError as e:
            kind = KIND_NAMES.get(self.kind, "valid value")
            raise ValueError(f"{self.env} must be {kind}, got {raw!r} ({e})") from None


_P = PipelineConfig()
VARS: tuple[Var, ...] = (
    # Where the services are
    Var("KAFKA", "", "services", "Kafka bootstrap servers; empty: `stepwise up` embeds a broker"),
    Var("REDIS", "", "services", "Redis URL; empty: `stepwise up` starts an embedded one"),
    Var("TOPIC_PREFIX", _P.topic_prefix, "services", "prefix of every topic and Redis key"),
    Var(
        "SERVICE_NICE", "10", "services", "`stepwise up`: niceness of the non-model processes", int
    ),
    # How the stages behave (PipelineConfig)
    Var("MODEL", _P.model, "pipeline", "a model path or a bundled name (`stepwise models list`)"),
    Var("REASONING_FORMAT", "", "pipeline", "how the model writes its reasoning; empty: detected"),
    Var(
        "DTYPE",
        _P.dtype,
        "pipeline",
        "weights' dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
    ),
    Var("WORKER_ID", "", "pipeline", "this worker's id; empty: <stage>-<host>-<pid>"),
    Var(
        "KV_TRANSPORT",
        _P.kv_transport,
        "pipeline",
        "prefill -> decode KV handoff",
        choices=("shm_pool", "shm", "cuda_ipc", "mooncake"),
    ),
    Var(
        "MOONCAKE_HOST",
        "",
        "pipeline",
        "KV_TRANSPORT mooncake: the address other hosts reach this worker's engine at; "
        "empty: this host's",
    ),
    Var(
        "KV_READ_TIMEOUT_MS",
        str(_P.kv_read_timeout_ms),
        "pipeline",
        "decode: deadline of a remote (mooncake) KV read; past it the job is prefilled again",
        int,
    ),
    Var(
        "EXPORT_POOL_MB",
        str(_P.export_pool_mb),
        "pipeline",
        "prefill: KV leased out at once (MiB)",
        int,
    ),
    Var(
        "KV_LEASE_MS",
        str(_P.kv_lease_ms),
        "pipeline",
        "prefill keeps an unacked export this long",
        int,
    ),
    Var(
        "MAX_DECODE_SEQS",
        str(_P.max_decode_seqs),
        "pipeline",
        "decode: sequences in the running batch",
        int,
    ),
    Var(
        "MAX_PREFILL_BATCH",
        str(_P.max_prefill_batch),
        "pipeline",
        "prefill: jobs prefilled together",
        int,
    ),
    Var(
        "VERDICT_TIMEOUT_S",
        str(_P.verdict_timeout_s),
        "pipeline",
        "decode: a later verdict counts as unknown",
        float,
    ),
    Var(
        "MAX_RETRIES",
        str(_P.max_retries),
        "pipeline",
        "decode: resamples of a contradicted step",
        int,
    ),
    Var("MAX_BACKTRACKS", str(_P.max_backtracks), "pipeline", "decode: backtracks per job", int),
    Var("ENGINE", _P.engine, "pipeline", "prefill/decode engine", choices=("native", "vllm")),
    Var("VLLM_URL", "", "pipeline", "engine vllm: a running vLLM server; empty: one is started"),
    Var(
        "DECODE_CORE",
        _P.decode_core,
        "pipeline",
        "decode's engine core: own process or a thread",
        choices=("process", "thread"),
    ),
    # The engine's process-wide switches
    Var("KERNELS", "auto", "engine", "kernel implementations", choices=("auto", "triton", "torch")),
    Var("KERNELS_DIR", "~/.cache/stepwise/kernels", "engine", "where the C kernels are built"),
    Var("KERNELS_CFLAGS", "", "engine", "extra C flags for the kernels (e.g. -mno-avx512f)"),
    Var("CUDA_GRAPHS", "1", "engine", "capture decode steps as CUDA graphs (CUDA + Triton)", _bool),
    Var("MODELS_DIR", "~/.cache/stepwise/models", "engine", "prepared models' cache folder"),
    Var("GC_FREEZE", "1", "engine", "freeze what a worker loaded out of the collector", _bool),
    Var(
        "VLLM_PYTHON",
        "",
        "engine",
        "an interpreter that imports vllm; empty: .venv-vllm, else this one",
    ),
    # Metrics and the verify pool
    Var(
        "METRICS_PORT",
        "0",
        "metrics",
        "/metrics: 0 a free port, N: N + the process's offset, -1 off",
        int,
    ),
    # Loopback unless told: /metrics has no authentication and its labels name tenants' work.
    Var("METRICS_ADDR", "127.0.0.1", "metrics", "address /metrics binds (0.0.0.0: all)"),
    # Traces (docs/tracing.md)
    Var(
        "TRACE_SAMPLE",
        "0",
        "tracing",
        "fraction of jobs traced: 0 off (no tracer is built), 1 every job",
        float,
    ),
    Var(
        "OTLP_ENDPOINT",
        "",
        "tracing",
        "OTLP/HTTP collector for spans (http://host:4318); empty: OTEL_EXPORTER_OTLP_* or none",
    ),
    Var("TRACE_DIR", "~/.cache/stepwise/traces", "tracing", "the local span store (JSON lines)"),
    Var("VERIFY_CONCURRENCY", "1", "verify", "checker processes per verify worker", int),
    Var(
        "VERIFY_TEST_DELAY_MS",
        "0",
        "verify",
        "test knob: pool child 0 sleeps this long before each check (an injected slow worker)",
        float,
    ),
    # The budget controller
    Var(
        "SLO_MS", "", "budget", "interactive class's p95 SLO (ms); empty: the law's default", float
    ),
    Var(
        "BATCH_SLO_MS", "", "budget", "batch class's p95 SLO (ms); empty: the law's default", float
    ),
    Var("MAX_THINKING_TOKENS", "", "budget", "the law's upper bound on thinking tokens", int),
    Var(
        "MIN_THINKING_TOKENS",
        "",
        "budget",
        "the thinking budget the law cuts to before it sheds load (empty: 64)",
        int,
    ),
    # The gateway
    Var("GATEWAY_PORT", "8000", "gateway", "HTTP / WebSocket / OpenAI API port", int),
    Var("GATEWAY_HOST", "127.0.0.1", "gateway", "address the gateway binds"),
    Var(
        "GATEWAY_ALLOW_OPEN",
        "0",
        "gateway",
        "serve beyond loopback with no API keys (warned at start); else such a gateway refuses",
        _bool,
    ),
    Var("API_KEYS", "", "gateway", "key:tenant,...; empty: no auth, tenant `default`", secret=True),
    Var("API_KEYS_REDIS", "0", "gateway", "also accept keys from Redis ({prefix}apikeys)", _bool),
    Var("KEY_CACHE_TTL_S", "5.0", "gateway", "Redis-held keys are cached this long", float),
    Var(
        "TENANT_MAX_INFLIGHT", "0", "gateway", "jobs without a Result per tenant; 0: no limit", int
    ),
    Var("TENANT_RATE", "0", "gateway", "jobs/s per tenant; 0: no limit", float),
    Var("TENANT_BURST", "", "gateway", "burst of TENANT_RATE; empty: the rate rounded up", int),
    Var("TENANT_RATES", "", "gateway", "per-tenant rates: tenant:rate[/burst],..."),
    Var("WS_MAX_QUEUE", "1000", "gateway", "events a WebSocket may fall behind", int),
    Var("WS_DEFLATE", "0", "gateway", "permessage-deflate on WebSockets", _bool),
    # Clients (`stepwise stream`)
    Var(
        "GATEWAY_URL",
        "",
        "client",
        "the gateway for `stepwise stream`; empty: 127.0.0.1:GATEWAY_PORT",
    ),
    Var("API_KEY", "", "client", "the key `stepwise stream` sends", secret=True),
)
BY_NAME = {v.name: v for v in VARS}
# Read by the set-up scripts and the test suite, not by the pipeline: known, so not reported.
ELSEWHERE = {
    "TEST_SERVICES": "tests: auto | docker | embedded (tests/service_plan.py)",
    "TEST_KAFKA": "tests: a Kafka to run the integration suite on",
    "TEST_REDIS": "tests: a Redis to run the integration suite on",
    "TEST_ARTIFACTS": "tests: where integration tests keep their logs",
    "SKIP_VLLM": "scripts/setup.sh: skip the vLLM venv",
    "VLLM_VENV": "scripts/setup.sh: where the vLLM venv goes",
    "TORCH_VERSION": "scripts/setup.sh: the torch pinned",
    "TEST_MOONCAKE": "tests: 1 fails the mooncake tests where the wheel is missing (else skip)",
    "BIND": "docker-compose.yml: the host address its published ports bind (127.0.0.1)",
}


KNOWN = frozenset(BY_NAME) | frozenset(ELSEWHERE)


class Settings:
    """The effective settings of one process: a typed value and a source for every `Var`."""

    def __init__(self, values: Mapping[str, object], sources: Mapping[str, str], unknown=()):
        self._values, self._sources = dict(values), dict(sources)
        self.unknown: tuple[str, ...] = tuple(unknown)

    @classmethod
    def load(
        cls, env: Mapping[str, str] | None = None, flags: Mapping[str, object] | None = None
    ) -> Settings:
        """Flags (None: not given) over the environment (empty: unset) over the defaults."""
        env = os.environ if env is None else env
        values, sources = {}, {}
        for var in VARS:
            flag = (flags or {}).get(var.name)
            if flag is not None:
                values[var.name], sources[var.name] = flag, "flag"
            elif env.get(var.env):
                values[var.name], sources[var.name] = var.parse(env[var.env]), "env"
            else:
                values[var.name] = var.parse(var.default) if var.default else None
                sources[var.name] = "default"
        unknown = [k for k in env if k.startswith(PREFIX) and k[len(PREFIX) :] not in KNOWN]
        return cls(values, sources, sorted(unknown))

    def __getitem__(self, name: str) -> object:
        return self._values[name]

    def source(self, name: str) -> str:
        return self._sources[name]

    # -- the concern configs ------------------------------------------------------------
    def pipeline(self, **overrides: object) -> PipelineConfig:
        # Each PipelineConfig field that has a setting of its name (kafka: STEPWISE_KAFKA).
        values = {
            f.name: "" if self._values[f.name.upper()] is None else self._values[f.name.upper()]
            for f in dataclasses.fields(PipelineConfig)
            if f.name.upper() in BY_NAME
        }
        return PipelineConfig(**(values | overrides))  # type: ignore[arg-type]

    def gateway(self, **overrides: object):  # -> GatewayConfig (imported late: no cycle)
        from pipeline.gateway.settings import (
            GatewayConfig,
            parse_api_keys,
            parse_rate_limits,
            rate_limit,
        )

        values: dict[str, object] = {
            "pipeline": self.pipeline(),
            "port": self["GATEWAY_PORT"],
            "host": self["GATEWAY_HOST"],
            "allow_open": self["GATEWAY_ALLOW_OPEN"],
            "api_keys": parse_api_keys(self["API_KEYS"] or ""),
            "api_keys_redis": self["API_KEYS_REDIS"],
            "key_cache_ttl_s": self["KEY_CACHE_TTL_S"],
            "tenant_max_inflight": self["TENANT_MAX_INFLIGHT"],
            "tenant_rate": rate_limit(self["TENANT_RATE"], self["TENANT_BURST"]),
            "tenant_rates": parse_rate_limits(self["TENANT_RATES"] or ""),
            "ws_max_queue": self["WS_MAX_QUEUE"],
            "ws_deflate": self["WS_DEFLATE"],
        }
        return GatewayConfig(**(values | overrides))

    def budget(self):  # -> BudgetConfig
        from pipeline.budget import BudgetConfig

        return BudgetConfig.scaled(
            slo_ms=self["SLO_MS"],
            batch_slo_ms=self["BATCH_SLO_MS"],
            max_thinking_tokens=self["MAX_THINKING_TOKENS"],
            min_thinking_tokens=self["MIN_THINKING_TOKENS"],
        )

    # -- what is shown and handed on ----------------------------------------------------
    def child_env(self, base: Mapping[str, str] | None = None, **values: object) -> dict[str, str]:
        """An environment for a child process: `base` (default ours) with every setting not at
        its default written out, and `values` on top, so a child builds the same settings."""
        env = dict(os.environ if base is None else base)
        for var in VARS:
            if self._sources[var.name] != "default":
                env[var.env] = _raw(self._values[var.name])
        env.update({PREFIX + k: _raw(v) for k, v in values.items()})
        return env

    def rows(self) -> list[dict[str, str]]:
        """One row per setting for `stepwise config`: variable, value shown, source, help."""
        out = []
        for var in VARS:
            value = self._values[var.name]
            shown = _raw(value) if value is not None else ""
            if var.secret and shown:
                shown = "(set)"
            out.append({
                "variable": var.env, "value": shown, "source": self._sources[var.name],
                "concern": var.concern, "help": var.help,
            })  # fmt: skip
        return out

    def unknown_report(self) -> list[str]:
        """One line per unknown `STEPWISE_*` variable, with the nearest known name."""
        known = [v.env for v in VARS] + [PREFIX + k for k in ELSEWHERE]
        lines = []
        for name in self.unknown:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            lines.append(f"unknown setting {name} is ignored{hint}")
        return lines


def _raw(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)


_installed: Settings | None = None


def install(settings: Settings | None) -> None:
    """This process's settings from now on (None: rebuilt from the environment on next use)."""
    global _installed
    _installed = settings


def current() -> Settings:
    """The installed settings, else the environment's (built once, then kept)."""
    global _installed
    if _installed is None:
        _installed = Settings.load()
    return _installed
