"""`stepwise models prepare r1-reasoner` on a random tiny base and a freshly trained adapter:
merged once per adapter, named qwen3 by its stepwise.json, loaded by the engine with the
greedy output of HF transformers on the same directory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.errors import ModelLoadError
from pipeline.formats import detect_format
from pipeline.models.paths import is_current
from pipeline.models.prepare import prepare_r1_reasoner
from tests.model_factory import add_char_tokenizer, hf_greedy, make_tiny_model

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("r1prep")
    base = add_char_tokenizer(make_tiny_model("llama", root), chat_template=TEMPLATE)
    spec = importlib.util.spec_from_file_location("train_r1", ROOT / "tools/train_r1_reasoner.py")
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    adapter = root / "adapter"
    args = ["--base", str(base), "--out", str(adapter), "--steps", "3", "--batch-size", "2"]
    assert trainer.main([*args, "--max-len", "96", "--warmup", "1", "--threads", "1"]) == 0
    return base, adapter


def test_merged_once_per_adapter_and_named_qwen3(trained, tmp_path):
    base, adapter = trained
    dest = prepare_r1_reasoner(tmp_path / "r1", base=base, adapter_dir=adapter)
    assert detect_format(dest) == "qwen3" and is_current(dest, adapter)
    stamp = (dest / "model.safetensors").stat().st_mtime_ns
    assert prepare_r1_reasoner(dest, base=base, adapter_dir=adapter) == dest
    assert (dest / "model.safetensors").stat().st_mtime_ns == stamp  # not merged again
    tensors = load_file(str(adapter / "adapter.safetensors"))
    key = next(k for k in tensors if k.endswith("lora_b"))
    tensors[key] = tensors[key] + 0.01
    save_file(tensors, str(adapter / "adapter.safetensors"))  # a retrained adapter
    assert not is_current(dest, adapter)
    prepare_r1_reasoner(dest, base=base, adapter_dir=adapter)
    assert is_current(dest, adapter)


def test_the_engine_loads_it_like_hf(trained, tmp_path):
    base, adapter = trained
    dest = prepare_r1_reasoner(tmp_path / "r1", base=base, adapter_dir=adapter)
    engine = Engine(EngineConfig(model=str(dest), dtype="float32", kv_cache_memory_gb=0.05))
    assert engine.reasoning_format.name == "qwen3"
    hf = transformers.AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32).eval()
    ids = [5, 17, 40, 3, 99, 12, 7]
    (out,) = engine.generate([ids], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    assert out.token_ids == hf_greedy(hf, ids, 24)


def test_a_missing_adapter_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="train one with tools/train_r1_reasoner.py"):
        prepare_r1_reasoner(tmp_path / "r1", adapter_dir=tmp_path / "none")
