"""vLLM's own reasoning-parser test cases (tests/reasoning/, ported as data with the file and
commit of each: data/vllm_reasoning_cases.json) run against our formats.

Each case is split whole, streamed at vLLM's token split (markers whole, words with their
leading space: the pieces vLLM's tests stream, emulated since their tokenizers are not
downloaded here), streamed at the explicit deltas where vLLM's test gives them, and streamed cut
in two at every point; all must agree. Then the comparison with vLLM's expectation, normalized:
None and "" are one, and whitespace at a part's edges (after a marker) is not compared
(docs/reasoning-formats.md). A case marked `difference` is one where Stepwise deliberately
gives something else: there we hold Stepwise to what it gives and vLLM's expectation to being
different, so the list of differences stays true. `strict` marks the cases that pass only
normalized; the docs list them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.formats import Split, get_format
from pipeline.formats.harmony import TOKENS as HARMONY_TOKENS
from tests.unit.formats.test_streaming import stream

DATA = json.loads((Path(__file__).parent / "data" / "vllm_reasoning_cases.json").read_text())
CASES = DATA["cases"]
# A GPT-2-style pre-tokenizer's pieces: a word with its leading space, punctuation, whitespace.
_PIECE = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


def by_kind(*kinds: str, asserting: str | None = None) -> list:
    return [
        pytest.param(c, id=c["id"])
        for c in CASES
        if c["kind"] in kinds and (asserting is None or asserting in c)
    ]


def norm(part: str | None) -> str:
    return (part or "").strip()


def markers_of(name: str) -> tuple[str, ...]:
    fmt = get_format(name)
    if fmt.name == "gpt_oss":
        return HARMONY_TOKENS
    return fmt.markers.lexicon.markers if fmt.markers is not None else ()


def token_split(text: str, markers: tuple[str, ...]) -> list[str]:
    """`text` cut the way a tokenizer would: each marker one token, the rest in words."""
    if not markers:
        return _PIECE.findall(text)
    pattern = "(" + "|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)) + ")"
    pieces: list[str] = []
    for i, chunk in enumerate(re.split(pattern, text)):
        pieces += [chunk] if i % 2 else _PIECE.findall(chunk)
    assert "".join(pieces) == text
    return pieces


def whole_agrees_with_every_stream(case: dict) -> Split:
    """The whole split, checked against every way of streaming the output."""
    name, text, prompt = case["format"], case["output"], case.get("prompt", "")
    whole = get_format(name).split(text, prompt)
    assert stream(name, token_split(text, markers_of(name)), prompt) == whole, "token split"
    if "deltas" in case:
        assert "".join(case["deltas"]) == text
        assert stream(name, case["deltas"], prompt) == whole, "vLLM's deltas"
    for i in range(len(text) + 1):
        assert stream(name, [text[:i], text[i:]], prompt) == whole, f"cut at {i}"
    return whole


def meets(got: Split, expected: dict) -> bool:
    """Does `got` meet vLLM's (or our) expectation for the parts it asserts, normalized?"""
    return all(
        norm(getattr(got, part)) == norm(expected[part])
        for part in ("reasoning", "content")
        if part in expected
    )


def meets_strictly(got: Split, expected: dict) -> bool:
    return all(
        getattr(got, part) == expected[part]
        for part in ("reasoning", "content")
        if part in expected
    )


def split_difference(case: dict) -> bool:
    """Is the case's listed difference in its split (not only in `is_reasoning_end`)?"""
    return any(part in case.get("difference", {}) for part in ("reasoning", "content"))


@pytest.mark.parametrize("case", by_kind("split"))
def test_split_as_vllm(case):
    got = whole_agrees_with_every_stream(case)
    if split_difference(case):
        assert meets(got, case["difference"]), (got, case["difference"])
        assert not meets(got, case), "listed as a difference, but vLLM's expectation is met"
        return
    assert meets(got, case), got
    strict = meets_strictly(got, case)
    assert strict != ("strict" in case), f"strictly {'equal' if strict else 'different'}: {got}"


@pytest.mark.parametrize("case", by_kind("split", "end", asserting="is_reasoning_end"))
def test_reasoning_end_as_vllm(case):
    fmt = get_format(case["format"])
    whole_agrees_with_every_stream(case)
    ended = fmt.thinking_state(case["output"], case.get("prompt", "")) == "content"
    if "is_reasoning_end" in case.get("difference", {}):
        assert ended is case["difference"]["is_reasoning_end"] is not case["is_reasoning_end"]
        return
    assert ended is case["is_reasoning_end"]


@pytest.mark.parametrize("case", by_kind("delta"))
def test_one_delta_as_vllm(case):
    whole_agrees_with_every_stream(case)
    splitter = get_format(case["format"]).splitter(case.get("prompt", ""))
    splitter.feed(case["previous"])
    got = splitter.feed(case["delta"])
    if "difference" in case:
        assert meets(got, case["difference"]), (got, case["difference"])
        assert not meets(got, case), "listed as a difference, but vLLM's expectation is met"
    else:
        assert meets(got, case), got


@pytest.mark.parametrize("case", by_kind("properties"))
def test_properties_as_vllm(case):
    got = whole_agrees_with_every_stream(case)
    fmt = get_format(case["format"])
    checks = {
        "reasoning_nonempty": lambda v: bool(got.reasoning) is v,
        "reasoning_excludes": lambda v: all(s not in got.reasoning for s in v),
        "reasoning_includes": lambda v: all(s in got.reasoning for s in v),
        "reasoning_not_startswith": lambda v: not got.reasoning.startswith(v),
        "content_includes": lambda v: all(s in got.content for s in v),
        "content_excludes": lambda v: all(s not in got.content for s in v),
        "content_startswith": lambda v: got.content.startswith(v),
        "content_order": lambda v: got.content.index(v[0]) < got.content.index(v[1]),
        "content_empty": lambda v: (got.content == "") is v,
        "in_thinking": lambda v: fmt.in_thinking(case["output"], case.get("prompt", "")) is v,
    }
    failed = [k for k in checks if k in case and not checks[k](case[k])]
    if "reasoning" in case:
        failed += [] if norm(got.reasoning) == norm(case["reasoning"]) else ["reasoning"]
    if "difference" in case:
        assert failed == case["difference"]["fails"], (failed, got)
    else:
        assert not failed, (failed, got)


def test_every_case_cites_its_source():
    for c in CASES:
        assert c["source"].startswith("tests/reasoning/test_") and c["source"].endswith(".py")
        assert re.fullmatch(r"[0-9a-f]{40}", c["commit"]), c["id"]
        assert ("difference" in c) <= ("note" in c or "why" in c.get("difference", {})), c["id"]


def test_every_added_format_has_vllm_cases():
    ported = {c["format"] for c in CASES}
    added = {"gpt_oss", "mistral", "seed_oss", "granite", "glm45", "kimi_k2", "hunyuan_a13b"}
    added |= {"ernie45", "minimax_m2", "minimax_m2_append_think", "deepseek_v3", "gemma4"}
    added |= {"nemotron_v3", "olmo3", "step3", "deepseek_r1", "qwen3", "glm47", "kimi_k25"}
    assert added <= ported, added - ported


def test_the_docs_list_each_strict_difference_with_its_reason():
    """docs/reasoning-formats.md lists every case that passes only normalized, by its reason."""
    docs = (Path(__file__).parents[3] / "docs" / "reasoning-formats.md").read_text()
    listed = {}
    for line in docs.splitlines():
        m = re.fullmatch(r"\* (.+) \((\d+)\): (.+)", line)
        if m and m.group(3).startswith("`"):
            ids = re.findall(r"`([^`]+)`", m.group(3))
            assert len(ids) == int(m.group(2)), m.group(1)
            listed[m.group(1)] = set(ids)
    wanted: dict[str, set] = {}
    for c in CASES:
        if "strict" in c:
            wanted.setdefault(c["strict"], set()).add(c["id"])
    assert listed == wanted
