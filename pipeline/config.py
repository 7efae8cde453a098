"""Configuration objects of the contract, one per concern, each setting declared beside its field
(pipeline/settings.py): the engine's load options, the pipeline's services and stages, and the
runtime's process-wide switches."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipeline.settings import Settings, build, current, declared, parse_bool, setting

DTYPES = ("auto", "float32", "bfloat16", "float16")
ENGINES = ("native", "vllm")


DEFAULT_BLOCK_SIZE = 16  # tokens per KV block (ingest hashes prompts with it)


SPECULATIVE_METHODS = ("ngram", "suffix", "draft_model")


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """Speculative decoding in the native engine, in vLLM's `--speculative-config` names
    (pipeline/engine/speculative.py): `ngram` proposes the tokens that followed the latest
    earlier occurrence of the sequence's last n tokens (n from `prompt_lookup_max` down to
    `prompt_lookup_min`) in its own prompt and output; `suffix` walks suffix trees over the
    job's text and over its scope's (tenant's) earlier outputs (suffix.py), with SuffixDecoding's
    knobs; `draft_model` runs `model` (a smaller checkpoint with the target's tokenizer, a path
    or a bundled name) greedily for the next tokens (draft.py). `num_speculative_tokens`
    defaults to 4 (ngram, draft_model) and to the tree depth for suffix, as in vLLM.
    """

    method: str = "ngram"
    num_speculative_tokens: int | None = None
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_cached_requests: int = 10000
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1
    # No proposals in a step where more sequences than this are running: on a CPU a large batch
    # is bound by arithmetic and rejected rows cost as much as kept ones (None: always propose).
    disable_by_batch_size: int | None = None
    # Each step's proposals are cut to what pays at the engine's measured cost of a forward row
    # against the measured chance each proposed token is kept (engine/proposal_sizing.py);
    # False: every sequence verifies what its method proposes, as vLLM does.
    size_by_cost: bool = True
    model: str | None = None  # draft_model: the draft's checkpoint (path or bundled name)

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative method must be one of {SPECULATIVE_METHODS}")
        if self.method == "draft_model" and self.model is None:
            raise ValueError("method draft_model needs `model`: the draft's checkpoint or name")
        if self.method != "draft_model" and self.model is not None:
            raise ValueError(f"`model` names a draft: method {self.method} takes none")
        if self.num_speculative_tokens is None:
            k = self.suffix_decoding_max_tree_depth if self.method == "suffix" else 4
            object.__setattr__(self, "num_speculative_tokens", k)
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be at least 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if self.suffix_decoding_max_tree_depth < 2:
            raise ValueError("suffix_decoding_max_tree_depth must be at least 2")
        if self.suffix_decoding_max_cached_requests < 0:
            raise ValueError("suffix_decoding_max_cached_requests must be >= 0 (0: none kept)")
        if self.suffix_decoding_max_spec_factor <= 0:
            raise ValueError("suffix_decoding_max_spec_factor must be > 0")
        if not 0.0 <= self.suffix_decoding_min_token_prob <= 1.0:
            raise ValueError("suffix_decoding_min_token_prob must be in [0, 1]")
        if self.disable_by_batch_size is not None and self.disable_by_batch_size < 1:
            raise ValueError("disable_by_batch_size must be at least 1")
        if not isinstance(self.size_by_cost, bool):
            raise ValueError("size_by_cost must be true or false")

    @classmethod
    def from_json(cls, text: str) -> SpeculativeConfig | None:
        """vLLM's `--speculative-config` JSON (`{"method": "ngram", ...}`); empty: off."""
        if not text.strip():
            return None
        try:
            fields = json.loads(text)
            return cls(**fields)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"--speculative-config: {exc}") from None


def speculative_json(text: str) -> str:
    """A `--speculative-config` setting's text, checked as it is read (ValueError says why)."""
    SpeculativeConfig.from_json(text)
    return text


@dataclass(slots=True)
class EngineConfig:
    """How the native engine loads a model and batches work."""

    model: str
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    device: str = "auto"  # auto: cuda when available, else cpu
    block_size: int = DEFAULT_BLOCK_SIZE
    # KV pool size: explicit block count, or derived from a memory budget.
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float = 1.0
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    enable_prefix_caching: bool = True
    # How the model writes its reasoning (docs/reasoning-formats.md); None: detected from the
    # model directory. The step delimiter is the format's unless set here.
    reasoning_format: str | None = None
    step_delimiter: str | None = None
    seed: int = 0  # seeds requests that bring no seed of their own
    num_threads: int | None = None  # torch intra-op threads; None leaves torch's choice
    # CPU: run projections through oneDNN with prepacked weights (pipeline/kernels/cpu_linear).
    cpu_prepack: bool = True
    # Speculative decoding (None: off). Outputs are the same tokens as without it.
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ValueError("num_kv_blocks must be at least 2")
        if self.kv_cache_memory_gb <= 0:
            raise ValueError("kv_cache_memory_gb must be positive")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be at least 2")
        if self.step_delimiter is not None and not self.step_delimiter:
            raise ValueError("step_delimiter must not be empty")


KV_TRANSPORTS = ("shm_pool", "shm", "cuda_ipc", "mooncake")
KERNEL_CHOICES = ("auto", "triton", "torch")


@declared
@dataclass(slots=True)
class PipelineConfig:
    """Where the pipeline's services are and how its stages behave (every STEPWISE_* setting of
    the services and pipeline concerns is a field here: pipeline/settings.py)."""

    kafka: str = setting(
        "",
        env="KAFKA",
        concern="services",
        help="Kafka bootstrap servers; empty: `stepwise up` embeds a broker",
    )
    redis: str = setting(
        "",
        env="REDIS",
        concern="services",
        help="Redis URL; empty: `stepwise up` starts an embedded one",
    )
    topic_prefix: str = setting(
        "stepwise.",
        env="TOPIC_PREFIX",
        concern="services",
        help="prefix of every topic and Redis key",
    )
    model: str = setting(
        "r1-reasoner",  # the demo's: what a user sees first is what `stepwise up` serves
        env="MODEL",
        concern="pipeline",
        flag="--model",
        help="a model path or a bundled name (`stepwise models list`)",
    )
    reasoning_format: str = setting(
        "",
        env="REASONING_FORMAT",
        concern="pipeline",
        flag="--reasoning-format",
        help="how the model writes its reasoning (docs/reasoning-formats.md); empty: detected",
    )
    tool_call_parser: str = setting(
        "",
        env="TOOL_CALL_PARSER",
        concern="pipeline",
        flag="--tool-call-parser",
        help="how the model writes tool calls (vLLM's names: hermes, mistral, llama3_json, "
        "deepseek_v3, kimi_k2, openai); empty: the reasoning format's family, else hermes",
    )
    dtype: str = setting("auto", env="DTYPE", concern="pipeline", choices=DTYPES,
                         help="weights' dtype")  # fmt: skip
    worker_id: str = setting(
        "",
        env="WORKER_ID",
        concern="pipeline",
        help="this worker's id; empty: <stage>-<host>-<pid>",
    )
    # shm_pool: decode copies blocks straight out of prefill's pool (one copy; CPU engines);
    # shm: prefill copies them into a buffer, decode out of it; cuda_ipc: the same on a GPU;
    # mooncake: shm_pool's pool also served over Mooncake's transfer engine, so a decode worker
    # on another host reads the blocks over TCP (docs/kv-transfer.md).
    speculative_config: str = setting(
        "",
        env="SPECULATIVE_CONFIG",
        concern="pipeline",
        kind=speculative_json,
        help="decode's speculative decoding, vLLM's --speculative-config JSON "
        '(e.g. {"method": "ngram", "num_speculative_tokens": 4}, {"method": "suffix"} or '
        '{"method": "draft_model", "model": "smollm2"}); empty: off',
    )
    kv_transport: str = setting(
        "shm_pool",
        env="KV_TRANSPORT",
        concern="pipeline",
        choices=KV_TRANSPORTS,
        help="prefill -> decode KV handoff",
    )
    mooncake_host: str = setting(
        "",
        env="MOONCAKE_HOST",
        concern="pipeline",
        help="KV_TRANSPORT mooncake: the address other hosts reach this worker's engine at; "
        "empty: this host's",
    )
    kv_read_timeout_ms: int = setting(
        2000,
        env="KV_READ_TIMEOUT_MS",
        concern="pipeline",
        help="decode: deadline of a remote (mooncake) KV read; past it the job is prefilled again",
    )
    export_pool_mb: int = setting(
        512,
        env="EXPORT_POOL_MB",
        concern="pipeline",
        help="prefill: KV leased out at once (MiB; backpressure above)",
    )
    kv_lease_ms: int = setting(
        30_000,
        env="KV_LEASE_MS",
        concern="pipeline",
        help="prefill keeps an unacked export this long",
    )
    job_state_ttl_s: int = 24 * 3600  # dedupe / done markers in Redis
    max_prefill_batch: int = setting(
        16, env="MAX_PREFILL_BATCH", concern="pipeline", help="prefill: jobs prefilled together"
    )
    max_decode_seqs: int = setting(
        64, env="MAX_DECODE_SEQS", concern="pipeline", help="decode: sequences in the running batch"
    )
    default_max_steps: int = 64  # budget when the controller has published none
    default_max_thinking_tokens: int = 512
    drain_timeout_s: float = 30.0  # SIGTERM: how long in-flight work may take to finish
    verdict_timeout_s: float = setting(
        10.0,
        env="VERDICT_TIMEOUT_S",
        concern="pipeline",
        help="decode: a later verdict counts as unknown",
    )
    max_retries: int = setting(
        8,
        env="MAX_RETRIES",
        concern="pipeline",
        help="decode: resamples of a contradicted step (then the step before it)",
    )
    max_backtracks: int = setting(
        32,
        env="MAX_BACKTRACKS",
        concern="pipeline",
        help="decode: backtracks per job, then it finishes as unverified",
    )
    fast_verdicts: bool = setting(
        True,
        env="FAST_VERDICTS",
        concern="pipeline",
        help="decode: contradict a false claim with no unknowns itself, with no round trip to "
        "the checker (off: every verdict the checker's)",
    )
    engine: str = setting(
        "native",
        env="ENGINE",
        concern="pipeline",
        choices=ENGINES,
        flag="--engine",
        help="prefill/decode engine (docs/vllm.md)",
    )
    vllm_url: str = setting(
        "",
        env="VLLM_URL",
        concern="pipeline",
        help="engine vllm: a running vLLM server; empty: each worker starts one",
    )
    # decode: its engine core in a process of its own (off the event loop's GIL), or on a
    # thread of the worker (tests that patch the core in-process)
    decode_core: str = setting(
        "process",
        env="DECODE_CORE",
        concern="pipeline",
        choices=("process", "thread"),
        help="decode's engine core: a process of its own or a thread",
    )

    @classmethod
    def from_settings(cls, source: Settings | None = None, **overrides: object) -> PipelineConfig:
        """The pipeline's config from the process's settings (`overrides` on top)."""
        return build(cls, source, **overrides)

    def __post_init__(self) -> None:
        if self.kv_transport not in KV_TRANSPORTS:
            raise ValueError(
                f"kv_transport must be one of {', '.join(KV_TRANSPORTS)}, got {self.kv_transport!r}"
            )
        if self.kv_read_timeout_ms < 1:
            raise ValueError(f"kv_read_timeout_ms must be positive, got {self.kv_read_timeout_ms}")
        if self.export_pool_mb < 1 or self.max_prefill_batch < 1 or self.max_decode_seqs < 1:
            raise ValueError("pool size and batch sizes must be positive")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be native or vllm, got {self.engine!r}")
        if self.decode_core not in ("process", "thread"):
            raise ValueError(f"decode_core must be process or thread, got {self.decode_core!r}")


@declared
@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The runtime's process-wide switches: read deep in the engine, the kernels, the model
    cache and the workers (`runtime()`), never passed down a call chain."""

    kernels: str = setting("auto", env="KERNELS", concern="engine", choices=KERNEL_CHOICES,
                           help="kernel implementations")  # fmt: skip
    kernels_dir: str = setting(
        "~/.cache/stepwise/kernels",
        env="KERNELS_DIR",
        concern="engine",
        help="where the C kernels are built",
    )
    kernels_cflags: str = setting(
        "",
        env="KERNELS_CFLAGS",
        concern="engine",
        help="extra C flags for the kernels (e.g. -mno-avx512f)",
    )
    cuda_graphs: bool = setting(
        True,
        env="CUDA_GRAPHS",
        concern="engine",
        help="capture decode steps as CUDA graphs (CUDA + Triton)",
    )
    models_dir: str = setting(
        "~/.cache/stepwise/models",
        env="MODELS_DIR",
        concern="engine",
        help="prepared models' cache folder",
    )
    gc_freeze: bool = setting(
        True,
        env="GC_FREEZE",
        concern="engine",
        help="freeze what a worker loaded out of the collector",
    )
    vllm_python: str = setting(
        "",
        env="VLLM_PYTHON",
        concern="engine",
        help="an interpreter that imports vllm; empty: .venv-vllm, else this one",
    )


_runtime: tuple[object, RuntimeConfig] | None = None


def runtime() -> RuntimeConfig:
    """The process's runtime switches, from its installed settings (rebuilt when they change)."""
    global _runtime
    source = current()
    if _runtime is None or _runtime[0] is not source:
        _runtime = (source, build(RuntimeConfig, source))
    return _runtime[1]


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DTYPES",
    "ENGINES",
    "KV_TRANSPORTS",
    "EngineConfig",
    "PipelineConfig",
    "RuntimeConfig",
    "parse_bool",
    "runtime",
]
