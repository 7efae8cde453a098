"""The format registry: names to `ReasoningFormat` classes (like vLLM's ReasoningParserManager)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeline.formats.base import ReasoningFormat

_FORMATS: dict[str, type[ReasoningFormat]] = {}


def _key(name: str) -> str:
    # `deepseek-r1`, `DeepSeek_R1` and `deepseek_r1` are one name (flags, env vars, JSON).
    return name.strip().lower().replace("-", "_")


def register_format(
    name: str, *, replace: bool = False
) -> Callable[[type[ReasoningFormat]], type[ReasoningFormat]]:
    """Class decorator: register a `ReasoningFormat` subclass under `name` (and set its
    `name`). A taken name is an error unless `replace` (so two formats never shadow silently)."""
    key = _key(name)
    if not key:
        raise ValueError("a reasoning format needs a name")

    def register(cls: type[ReasoningFormat]) -> type[ReasoningFormat]:
        if not (isinstance(cls, type) and issubclass(cls, ReasoningFormat)):
            raise TypeError(f"register_format({name!r}) needs a ReasoningFormat subclass")
        if key in _FORMATS and _FORMATS[key] is not cls and not replace:
            raise ValueError(f"reasoning format {key!r} is already registered")
        cls.name = key
        _FORMATS[key] = cls
        return cls

    return register


def format_for(model_dir: str | Path, name: str | None = None) -> ReasoningFormat:
    """The format named (an override: a flag, the environment), else the model's own."""
    from pipeline.formats.detect import detect_format

    return get_format(name or detect_format(model_dir))


def format_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_FORMATS)


def get_format(name: str) -> ReasoningFormat:
    """A fresh instance of the format registered as `name`; ValueError names the known ones."""
    cls = _FORMATS.get(_key(name))
    if cls is None:
        known = ", ".join(format_names())
        raise ValueError(f"unknown reasoning format {name!r}; known formats: {known}")
    return cls()
