"""The bundled tiny reasoner: loads through HF and through our engine, same greedy output."""

import json
from pathlib import Path

import pytest
import torch

from pipeline.evals import generate
from pipeline.evals.problems import format_prompt

MODEL = Path(__file__).resolve().parents[3] / "pipeline" / "assets" / "tiny-reasoner"
TEXTS = [
    "Q: Solve for x: 3x + 7 = 22.\n3x = 22 - 7 = 15\nx = 15 / 3 = 5\nAnswer: 5\n",
    "  spaces  and\n\nnewlines ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ ",
]


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    return tok, model


def test_shipped_files_and_size():
    names = {p.name for p in MODEL.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "MODEL_CARD.md"} <= names
    assert sum(p.stat().st_size for p in MODEL.iterdir()) <= 16 * 2**20
    config = json.loads((MODEL / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["max_position_embeddings"] >= 512


def test_tokenizer_round_trips_exactly(hf):
    from tokenizers import Tokenizer

    tok, _ = hf
    raw = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        assert ids == raw.encode(text).ids
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert raw.decode(ids) == text
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Compute 3 + 4."}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<s>" + format_prompt("Compute 3 + 4.")


def test_parameter_count(hf):
    _, model = hf
    assert 1e6 <= sum(p.numel() for p in model.parameters()) <= 5e6


def test_engine_matches_hf_greedy(hf):
    from pipeline.engine import Engine, EngineConfig, SamplingParams

    tok, model = hf
    problems = [generate(f, 1, seed=123)[0] for f in ("arith", "linear", "system", "word")]
    prompts = [format_prompt(p) for p in problems]
    engine = Engine(EngineConfig(model=str(MODEL), dtype="float32", device="cpu"))
    outs = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=80))
    for prompt, out in zip(prompts, outs, strict=True):
        ids = torch.tensor([tok(prompt)["input_ids"]])
        assert out.prompt_token_ids == ids[0].tolist()
        with torch.no_grad():
            ref = model.generate(
                ids,
                max_new_tokens=80,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, ids.shape[1] :].tolist()
        assert out.token_ids == ref, (prompt, out.text, tok.decode(ref))
        assert out.text == tok.decode(ref, skip_special_tokens=True)
