"""A JSON value read as it is written (pure): what is passed on, piece by piece, adds up to
`json.dumps(json.loads(raw), ensure_ascii=False)`, the finished call's `arguments`, whatever
the model's spacing and escapes; nothing passed on is ever taken back."""

from __future__ import annotations

import json
import random

import pytest

from pipeline.toolcalls.partial_json import JsonCanon

VALUES = [
    '{"city": "Paris", "unit": "celsius"}',
    '{ "city" :"Paris" ,\n  "days":3}',
    '{"q": "say \\"hi\\" \\\\ then\\nnewline\\ttab \\/ slash"}',
    '{"emoji": "\\ud83d\\ude00 and \\u00e9 and é", "cjk": "東京"}',
    '{"n": [1, -0, 1.50, 1e5, 2E-3, 0.1, 12345678901234567890]}',
    '{"flags": [true, false, null], "empty": {}, "none": []}',
    '{"nested": {"a": {"b": [{"c": 1}, {"d": [2, 3]}]}}, "z": "x"}',
    '{"latex": "\\\\frac{3}{4} \\\\cdot 8 = 6", "md": "**bold** `code`"}',
    '{"ctl": "\\u0001\\u001f", "lone": "\\ud800"}',
    "{}",
]


def expected(raw: str) -> str:
    return json.dumps(json.loads(raw), ensure_ascii=False)


def streamed(raw: str, cuts: list[int]) -> tuple[list[str], JsonCanon]:
    canon, pieces = JsonCanon(), []
    for cut in cuts:
        pieces.append(canon.feed(raw[:cut]))
    return pieces, canon


@pytest.mark.parametrize("raw", VALUES)
def test_character_by_character_adds_up_to_the_whole(raw):
    pieces, canon = streamed(raw, list(range(1, len(raw) + 1)))
    assert "".join(pieces) == expected(raw) and canon.done and not canon.failed
    if len(raw) > 20:  # passed on as it comes, not at the end
        assert sum(1 for p in pieces if p) > 5


@pytest.mark.parametrize("seed", range(20))
def test_any_cuts_add_up_alike(seed):
    rng = random.Random(seed)
    raw = rng.choice(VALUES)
    cuts = sorted(rng.sample(range(1, len(raw) + 1), k=min(len(raw), rng.randint(1, 6))))
    pieces, _ = streamed(raw, cuts + [len(raw)])
    assert "".join(pieces) == expected(raw)


def test_text_after_the_value_is_not_read():
    pieces, canon = streamed('{"a": 1}}\n</tool_call>', [4, 9, 22])
    assert "".join(pieces) == '{"a": 1}' and canon.done


def test_a_number_waits_for_what_ends_it():
    canon = JsonCanon()
    assert canon.feed('{"n": 1') == '{"n": '
    assert canon.feed('{"n": 1.5') == ""  # it may go on: 1.5e3
    assert canon.feed('{"n": 1.50}') == "1.5}"


def test_an_escape_waits_for_its_digits_and_a_surrogate_for_its_pair():
    canon = JsonCanon()
    assert canon.feed('"\\ud83') == '"'
    assert canon.feed('"\\ud83d') == ""
    assert canon.feed('"\\ud83d\\ude00"') == '😀"'


@pytest.mark.parametrize("raw", ['{"a": tru}', '{"a": 1..2}', "{'a': 1}", '{"a": "x\ny"}'])
def test_what_is_not_json_stops_the_reading(raw):
    canon = JsonCanon()
    canon.feed(raw)
    assert canon.failed and not canon.done
