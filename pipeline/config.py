"""Configuration objects, one per concern. This module is the one source of defaults."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("auto", "float32", "bfloat16", "float16")


DEFAULT_BLOCK_SIZE = 16  # tokens per KV block (ingest hashes prompts with it)


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


@dataclass(slots=True)
class PipelineConfig:
    """Where the pipeline's services are and how its stages behave (built by pipeline.settings)."""

    kafka: str = ""  # bootstrap servers; empty: `stepwise up` starts an embedded broker
    redis: str = ""  # URL; empty: `stepwise up` starts an embedded redis-server
    topic_prefix: str = "stepwise."
    model: str = "tiny-reasoner"  # a path or a known name (see `stepwise models list`)
    reasoning_format: str = ""  # empty: detected from the model (docs/reasoning-formats.md)
    dtype: str = "auto"
    worker_id: str = ""  # default: <stage>-<host>-<pid>
    # shm_pool: decode copies blocks straight out of prefill's pool (one copy; CPU engines);
    # shm: prefill copies them into a buffer, decode out of it; cuda_ipc: the same on a GPU;
    # mooncake: shm_pool's pool also served over Mooncake's transfer engine, so a decode worker
    # on another host reads the blocks over TCP (docs/kv-transfer.md).
    kv_transport: str = "shm_pool"
    mooncake_host: str = ""  # the address decode reaches prefill's engine at; empty: this host's
    kv_read_timeout_ms: int = 2000  # decode: a remote KV read's deadline, then it re-prefills
    export_pool_mb: int = 512  # prefill: bytes of KV leased out at once (backpressure above)
    kv_lease_ms: int = 30_000  # prefill keeps an export this long unless the importer acks
    job_state_ttl_s: int = 24 * 3600  # dedupe / done markers in Redis
    max_prefill_batch: int = 16  # prefill: jobs prefilled together
    max_decode_seqs: int = 64  # decode: sequences in the running batch
    default_max_steps: int = 64  # budget when the controller has published none (issue 6)
    default_max_thinking_tokens: int = 512
    drain_timeout_s: float = 30.0  # SIGTERM: how long in-flight work may take to finish
    verdict_timeout_s: float = 10.0  # decode: a step whose verdict is this late is `unknown`
    max_retries: int = 8  # decode: resamples of a contradicted step (then the step before it)
    max_backtracks: int = 32  # decode: per job, then it finishes as unverified
    engine: str = "native"  # native | vllm (prefill and decode; docs/vllm.md)
    vllm_url: str = ""  # engine vllm: a running vLLM OpenAI server; empty: each worker starts one
    # decode: its engine core in a process of its own (off the event loop's GIL), or on a
    # thread of the worker (tests that patch the core in-process)
    decode_core: str = "process"

    def __post_init__(self) -> None:
        if self.kv_transport not in KV_TRANSPORTS:
            raise ValueError(
                f"kv_transport must be one of {', '.join(KV_TRANSPORTS)}, got {self.kv_transport!r}"
            )
        if self.kv_read_timeout_ms < 1:
            raise ValueError(f"kv_read_timeout_ms must be positive, got {self.kv_read_timeout_ms}")
        if self.export_pool_mb < 1 or self.max_prefill_batch < 1 or self.max_decode_seqs < 1:
            raise ValueError("pool size and batch sizes must be positive")
        if self.engine not in ("native", "vllm"):
            raise ValueError(f"engine must be native or vllm, got {self.engine!r}")
        if self.decode_core not in ("process", "thread"):
            raise ValueError(f"decode_core must be process or thread, got {self.decode_core!r}")
