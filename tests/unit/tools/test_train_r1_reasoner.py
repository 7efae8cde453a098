"""The R1-style LoRA trainer's smoke test (a few steps on a random tiny model): it trains, its
checkpoints resume to the same adapter, and the merged weights give the adapted model's
logits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pipeline.models.prepare import merge_lora
from tests.model_factory import add_char_tokenizer, make_tiny_model
from tools.lora import add_lora

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def trainer():
    spec = importlib.util.spec_from_file_location("train_r1", ROOT / "tools/train_r1_reasoner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = make_tiny_model("llama", tmp_path_factory.mktemp("r1base"))
    return add_char_tokenizer(path, chat_template=TEMPLATE)


def run(base: Path, out: Path, *extra: str) -> None:
    args = ["--base", str(base), "--out", str(out), "--steps", "4", "--batch-size", "2"]
    args += [
        "--max-len",
        "128",
        "--save-every",
        "2",
        "--warmup",
        "2",
        "--rank",
        "4",
        "--threads",
        "1",
    ]
    assert trainer().main([*args, *extra]) == 0


def test_it_trains_and_a_stopped_run_resumes_to_the_same_adapter(base, tmp_path):
    straight, resumed = tmp_path / "a", tmp_path / "b"
    run(base, straight)
    rows = (straight / "train_log.csv").read_text().splitlines()
    assert rows[0].startswith("step,loss") and len(rows) == 5
    assert all(float(r.split(",")[1]) > 0 for r in rows[1:])
    run(base, resumed, "--stop-after", "2")
    assert load_file(str(resumed / "adapter.safetensors"))  # saved at the stop
    run(base, resumed, "--resume")
    a = load_file(str(straight / "adapter.safetensors"))
    b = load_file(str(resumed / "adapter.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(a[k].abs().sum() > 0 for k in a if k.endswith("lora_b"))  # it learned something


def test_merged_weights_give_the_adapted_model(base, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "m"
    run(base, out)
    adapter = load_file(str(out / "adapter.safetensors"))
    config = json.loads((out / "adapter_config.json").read_text())
    rank, alpha = config["rank"], config["alpha"]
    assert rank == 4
    adapted = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    add_lora(adapted, rank=rank, alpha=alpha)
    adapted.load_state_dict(adapter, strict=False)
    weights = load_file(str(base / "model.safetensors"))
    merged_model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    merged_model.load_state_dict(merge_lora(weights, adapter, rank, alpha), strict=False)
    ids = torch.tensor([[5, 17, 40, 3, 99, 12]])
    with torch.no_grad():
        want, got = adapted(ids).logits, merged_model(ids).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_a_tool_phase_starts_from_the_first_adapter_and_resumes_alike(base, tmp_path):
    """Issue 38's second phase: tool-use traces mixed in, starting from a first adapter (its
    weights, not its optimizer); stopped and resumed, it ends with the same adapter."""
    first, straight, resumed = tmp_path / "first", tmp_path / "a", tmp_path / "b"
    run(base, first)
    phase = ("--init-adapter", str(first), "--tool-share", "0.5", "--tool-max-len", "256")
    run(base, straight, *phase)
    run(base, resumed, *phase, "--stop-after", "2")
    run(base, resumed, *phase, "--resume")
    a = load_file(str(straight / "adapter.safetensors"))
    b = load_file(str(resumed / "adapter.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(first / "adapter.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in a)  # it trained on from there
    config = json.loads((straight / "adapter_config.json").read_text())
    assert config["tool_share"] == 0.5 and config["first_phase"]["step"] == 4
