"""What the eval runner generates with: our engine (default) or HF transformers (reference)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.config import EngineConfig
from pipeline.engine import SamplingParams
from pipeline.stage.engines import make_engine


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    num_tokens: int
    finish_reason: str | None


class Completer(Protocol):
    def generate(
        self, prompts: list[str], temperature: float, max_tokens: int, seeds: list[int]
    ) -> list[Completion]: ...


class EngineCompleter:
    """A step engine (native, or vLLM through pipeline/vllm/engine.py), driven directly
    (no Kafka); one request per prompt, seeded each."""

    def __init__(
        self,
        model: str | Path,
        dtype: str = "float32",
        device: str = "cpu",
        kind: str = "native",
        vllm_url: str = "",
        reasoning_format: str | None = None,
    ) -> None:
        self.name = kind
        config = EngineConfig(
            model=str(model), dtype=dtype, device=device, reasoning_format=reasoning_format
        )
        self.engine = make_engine(config, kind, vllm_url)

    def close(self) -> None:
        self.engine.close()

    def generate(
        self, prompts: list, temperature: float, max_tokens: int, seeds: list[int]
    ) -> list[Completion]:
        # A prompt that leaves no room in the context is a failed problem, not a failed run.
        ids = [self.engine.encode_prompt(p) for p in prompts]
        fits = [i for i, x in enumerate(ids) if len(x) < self.engine.max_model_len]
        params = [
            SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seeds[i])
            for i in fits
        ]
        outs = self.engine.generate([ids[i] for i in fits], params) if fits else []
        done = {
            i: Completion(o.text, len(o.token_ids), o.finish_reason)
            for i, o in zip(fits, outs, strict=True)
        }
        return [done.get(i, Completion("", 0, "prompt_too_long")) for i in range(len(prompts))]


class HFCompleter:
    """transformers `generate`, batched with left padding: the reference the engine must match."""

    name = "hf"

    def __init__(self, model: str | Path, dtype: str = "float32", device: str = "cpu") -> None:
        import torch  # optional heavy dependencies: the HF reference only
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(str(model))
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(str(model), dtype=getattr(torch, dtype))
        self.model.to(device).eval()
        self.device = device

    def generate(
        self, prompts: list[str], temperature: float, max_tokens: int, seeds: list[int]
    ) -> list[Completion]:
        context = self.model.config.max_position_embeddings
        fits = [i for i, p in enumerate(prompts) if len(self.tok(p)["input_ids"]) < context]
        done = (
            dict(
                zip(
                    fits,
                    self._generate([prompts[i] for i in fits], temperature, max_tokens, seeds[:1]),
                    strict=True,
                )
            )
            if fits
            else {}
        )
        return [done.get(i, Completion("", 0, "prompt_too_long")) for i in range(len(prompts))]

    def _generate(
        self, prompts: list[str], temperature: float, max_tokens: int, seeds: list[int]
    ) -> list[Completion]:
        torch, tok = self.torch, self.tok
        enc = tok(prompts, return_tensors="pt", padding=True).to(self.device)
        width = enc["input_ids"].shape[1]
        max_tokens = min(max_tokens, self.model.config.max_position_embeddings - width)
        sample = temperature > 0
        if sample:
            torch.manual_seed(seeds[0] if seeds else 0)  # per batch: HF has no per-row seeds
        with torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        comps = []
        for row in out[:, width:].tolist():
            ids = []
            for t in row:  # up to and including EOS; HF pads finished rows
                if t != tok.pad_token_id:
                    ids.append(t)
                if t == tok.eos_token_id:
                    break
            finish = "stop" if ids and ids[-1] == tok.eos_token_id else "length"
            comps.append(Completion(tok.decode(ids, skip_special_tokens=True), len(ids), finish))
        return comps


def make_completer(
    name: str,
    model: str | Path,
    dtype: str = "float32",
    vllm_url: str = "",
    reasoning_format: str | None = None,
) -> Completer:
    if name in ("native", "vllm"):
        return EngineCompleter(
            model, dtype, kind=name, vllm_url=vllm_url, reasoning_format=reasoning_format
        )
    if name == "hf":
        return HFCompleter(model, dtype)
    raise ValueError(f"unknown engine {name!r}; use native, vllm or hf")
