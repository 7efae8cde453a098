"""Multi-granularity cache (docs/cache.md): answer, step and prefix levels in Redis behind an
in-process LRU, with user / app / tenant scopes."""

from pipeline.cache.config import (
    CACHEABLE_STOPS,
    CACHEABLE_VERDICTS,
    KEY_VERSION,
    SCOPES,
    CacheConfig,
    Scope,
    ScopeName,
)
from pipeline.cache.keys import (
    answer_key,
    deterministic_params,
    digest,
    is_reproducible,
    normalize_text,
    partitions_key,
    prefix_hashes,
    step_key,
)
from pipeline.cache.lru import (
    LRU,
    CacheStats,
)
from pipeline.cache.store import (
    Cache,
)

__all__ = [
    "CACHEABLE_STOPS",
    "CACHEABLE_VERDICTS",
    "Cache",
    "CacheConfig",
    "CacheStats",
    "KEY_VERSION",
    "LRU",
    "SCOPES",
    "Scope",
    "ScopeName",
    "answer_key",
    "deterministic_params",
    "digest",
    "is_reproducible",
    "normalize_text",
    "partitions_key",
    "prefix_hashes",
    "step_key",
]
