"""Cache keys (docs/cache.md): pure functions. Every key is a blake2b digest over the key version,
the level, the scope's ids (the tenant id always among them) and the content, so one tenant's
entries are unreachable from another's.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from pipeline import schema
from pipeline.cache.config import _BLANK_LINES, _INNER_SPACE, _SAFE_ID, KEY_VERSION, _encoder
from pipeline.engine.block_manager import NO_HASH, hash_block

# -- keys: pure functions ----------------------------------------------------------------------


def digest(*parts: Any) -> str:
    """128-bit hex blake2b of the key version and the parts (msgpack: an unambiguous encoding)."""
    return hashlib.blake2b(_encoder.encode([KEY_VERSION, *parts]), digest_size=16).hexdigest()


def normalize_text(text: str) -> str:
    """NFC; line ends to \\n; trailing spaces cut; runs of spaces inside a line become one space;
    3+ newlines become 2; outer blank space stripped. Indentation is kept (code prompts)."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [_INNER_SPACE.sub(" ", line.rstrip()) for line in text.split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def is_reproducible(params: schema.JobParams) -> bool:
    """Greedy, or sampled with the user's own seed (ingest gives every other job a seed of its
    own id, so two such jobs never sample alike)."""
    return params.temperature == 0.0 or params.seed is not None


def _sampling(p: schema.JobParams) -> tuple | None:
    """The sampling knobs as floats (an int 0 and 0.0 must hash alike); None when greedy."""
    if p.temperature == 0.0:
        return None
    return (float(p.temperature), float(p.top_p), int(p.top_k), float(p.min_p))


def deterministic_params(params: schema.JobParams) -> tuple | None:
    """The params that shape the Result, canonical; None when the Result is not reproducible.
    Greedy decoding ignores the sampling knobs and the seed, so they are left out then."""
    if not is_reproducible(params):
        return None
    p, sampling = params, _sampling(params)
    seed = p.seed if sampling else None
    caps = [c for c in (p.max_thinking_tokens, p.thinking_budget) if c]  # either name
    thinking = min(caps) if caps else None
    return (sampling, seed, p.max_tokens, p.max_steps, thinking, p.verify, p.early_exit)


def _prompt_part(prompt: str | None, messages: Sequence[schema.Message] | None) -> list:
    if messages is not None:
        # An earlier turn's thinking shapes the prompt where the template keeps it.
        turns = [[m.role, normalize_text(m.content), m.reasoning_content] for m in messages]
        return ["messages", turns]
    return ["prompt", normalize_text(prompt or "")]


def _premises_part(premises: Iterable[str]) -> list[str]:
    return sorted({normalize_text(p) for p in premises})  # a set of assumptions: order-free


def answer_key(job: schema.Job, model: str) -> str | None:
    """The answer-level content key of a Job as received (before ingest assigns a seed), run on
    `model` (job.model or the default pool); None when its Result is not reproducible."""
    params = deterministic_params(job.params)
    if params is None:
        return None
    prompt = _prompt_part(job.prompt, job.messages)
    # The template's switches (`enable_thinking`) change the prompt it renders, sorted: a map.
    template = sorted((job.chat_template_kwargs or {}).items())
    parts = [model, prompt, _premises_part(job.premises), params, template]
    if (
        job.tools
        or job.structured_output
        or any(m.tool_calls or m.tool_call_id for m in job.messages or ())
    ):  # what the template renders and what the output is held to: part of the answer
        parts.append(_tools_part(job))
    return digest("answer", *parts)


def _tools_part(job: schema.Job) -> str:
    turns = [(m.tool_calls, m.tool_call_id, m.name) for m in job.messages or ()]
    fields = (job.tools, job.tool_choice, job.parallel_tool_calls, job.structured_output, turns)
    return msgspec.json.encode(fields).decode()


def step_key(
    model: str, prompt: str | Sequence[int], premises: Iterable[str], params: schema.JobParams
) -> str | None:
    """The step-level base key of one job, computed once; `prompt` is its text or its token ids.
    None for a sampled job without its own seed: a cached step would remove the diversity asked
    for. Verdicts depend on premises, so they are part of the key. A sampled job's seed is too,
    as in `answer_key`: steps sampled under one seed spliced into another seed's run would make
    a seeded Result depend on the jobs run before it. Greedy steps leave the seed out.

    Decode passes the params as admitted, where ingest has given an unseeded job a seed of its
    own id (`job_seed`): such a job's steps then serve only its own redelivery."""
    if not is_reproducible(params):
        return None
    text = normalize_text(prompt) if isinstance(prompt, str) else list(prompt)
    sampling = _sampling(params)
    seed = params.seed if sampling else None
    return digest("step", model, text, _premises_part(premises), sampling, seed, params.verify)


def prefix_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids`, as the engine's BlockManager makes them."""
    hashes, prev = [], NO_HASH
    for i in range(len(token_ids) // block_size):
        prev = hash_block(prev, list(token_ids[i * block_size : (i + 1) * block_size]))
        hashes.append(prev)
    return hashes


def _bounded(name: str) -> str:
    return name if _SAFE_ID.match(name) else digest("id", name)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def partitions_key(prefix: str, worker_id: str) -> str:
    """Where a prefill worker says which input partitions it consumes (prefix routing)."""
    return f"{prefix}partitions:{_bounded(worker_id)}"
