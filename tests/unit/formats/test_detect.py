"""detect_format on fake model directories (JSON only, no weights)."""

import json

import pytest

from pipeline.formats import detect_format, get_format
from pipeline.formats.detect import opens_thinking

THINK_TOKENS = [
    {"id": 151667, "content": "<think>", "special": False},
    {"id": 151668, "content": "</think>", "special": False},
]
QWEN3_TEMPLATE = (
    "{%- for message in messages %}...{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}"
)
R1_TEMPLATE = (
    "{% for message in messages %}{{'<｜User｜>' + message['content']}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write(d, name, obj):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return d


def test_stepwise_json_wins(tmp_path):
    write(tmp_path, "tokenizer.json", {"added_tokens": THINK_TOKENS})
    write(tmp_path, "stepwise.json", {"reasoning_format": "tiny"})
    assert detect_format(tmp_path) == "tiny"
    assert detect_format(str(tmp_path)) == "tiny"


def test_qwen3_from_tokenizer_json_and_template(tmp_path):
    write(tmp_path, "tokenizer.json", {"added_tokens": THINK_TOKENS, "model": {"vocab": {}}})
    write(tmp_path, "tokenizer_config.json", {"chat_template": QWEN3_TEMPLATE})
    assert detect_format(tmp_path) == "qwen3"


def test_r1_from_added_tokens_decoder_and_template(tmp_path):
    decoder = {str(t["id"]): t for t in THINK_TOKENS}
    write(tmp_path, "tokenizer_config.json", {"added_tokens_decoder": decoder})
    write(tmp_path, "chat_template.jinja", R1_TEMPLATE)
    assert detect_format(tmp_path) == "deepseek_r1"


def test_template_list_form(tmp_path):
    templates = [{"name": "default", "template": R1_TEMPLATE}]
    write(tmp_path, "tokenizer_config.json", {"chat_template": templates})
    write(tmp_path, "tokenizer.json", {"model": {"vocab": {"<think>": 5, "</think>": 6}}})
    assert detect_format(tmp_path) == "deepseek_r1"


def test_markers_in_the_vocabulary_only_and_no_template_is_qwen3(tmp_path):
    write(tmp_path, "tokenizer.json", {"model": {"vocab": [["<think>", 0.0], ["</think>", 0.0]]}})
    assert detect_format(tmp_path) == "qwen3"


def test_markers_in_the_template_only(tmp_path):
    write(tmp_path, "chat_template.json", {"chat_template": QWEN3_TEMPLATE})
    assert detect_format(tmp_path) == "qwen3"


def test_only_one_marker_is_plain(tmp_path):
    write(tmp_path, "tokenizer.json", {"added_tokens": THINK_TOKENS[:1]})
    write(tmp_path, "tokenizer_config.json", {"chat_template": PLAIN_TEMPLATE})
    assert detect_format(tmp_path) == "plain"


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"tokenizer.json": "{not json", "tokenizer_config.json": "[1, 2]"},
        {"stepwise.json": {"reasoning_format": ""}, "tokenizer.json": {"added_tokens": 3}},
        {"stepwise.json": ["tiny"], "tokenizer_config.json": {"chat_template": 7}},
    ],
)
def test_unreadable_or_odd_files_fall_back_to_plain(tmp_path, files):
    tmp_path.mkdir(exist_ok=True)
    for name, obj in files.items():
        write(tmp_path, name, obj)
    assert detect_format(tmp_path) == "plain"


def test_a_missing_directory_is_plain(tmp_path):
    assert detect_format(tmp_path / "absent") == "plain"


def test_detected_names_are_registered(tmp_path):
    write(tmp_path, "tokenizer_config.json", {"chat_template": R1_TEMPLATE + "</think>"})
    get_format(detect_format(tmp_path))


def test_opens_thinking():
    assert opens_thinking(R1_TEMPLATE)
    assert not opens_thinking(QWEN3_TEMPLATE)  # a closed block opens nothing
    assert not opens_thinking(PLAIN_TEMPLATE)
    assert not opens_thinking("<think> far from any generation prompt")
