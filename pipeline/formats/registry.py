"""The format registry: names to `ReasoningFormat` classes (like vLLM's ReasoningParserManager).

A format is registered under its name and its aliases: the names vLLM's `--reasoning-parser`
and SGLang's take for the same format (`openai_gptoss`, `minimax-append-think`), so a flag
copied from a vLLM or SGLang command line works here as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.formats.base import ReasoningFormat

_FORMATS: dict[str, type[ReasoningFormat]] = {}  # name or alias -> class


def _key(name: str) -> str:
    # `deepseek-r1`, `DeepSeek_R1` and `deepseek_r1` are one name (flags, env vars, JSON).
    return name.strip().lower().replace("-", "_")


def register_format(
    name: str, *, aliases: tuple[str, ...] = (), replace: bool = False
) -> Callable[[type[ReasoningFormat]], type[ReasoningFormat]]:
    """Class decorator: register a `ReasoningFormat` subclass under `name` and `aliases` (and
    set its `name` and `aliases`). A taken name is an error unless `replace` (so two formats
    never shadow each other silently)."""
    key = _key(name)
    keys = [key, *(_key(a) for a in aliases)]
    if not all(keys):
        raise ValueError("a reasoning format needs a name (and no empty alias)")

    def register(cls: type[ReasoningFormat]) -> type[ReasoningFormat]:
        if not (isinstance(cls, type) and issubclass(cls, ReasoningFormat)):
            raise TypeError(f"register_format({name!r}) needs a ReasoningFormat subclass")
        for k in keys:
            if k in _FORMATS and _FORMATS[k] is not cls and not replace:
                raise ValueError(f"reasoning format {k!r} is already registered")
        cls.name = key
        cls.aliases = tuple(dict.fromkeys(k for k in keys[1:] if k != key))
        for k in keys:
            _FORMATS[k] = cls
        return cls

    return register


def format_names() -> list[str]:
    """The registered formats' own names (not their aliases), sorted."""
    return sorted({cls.name for cls in _FORMATS.values()})


def format_classes() -> list[type[ReasoningFormat]]:
    """One class per registered format, in name order."""
    return sorted({cls.name: cls for cls in _FORMATS.values()}.values(), key=lambda c: c.name)


def get_format(name: str) -> ReasoningFormat:
    """A fresh instance of the format registered as `name` (or an alias); ValueError names
    the known ones."""
    cls = _FORMATS.get(_key(name))
    if cls is None:
        known = ", ".join(format_names())
        raise ValueError(f"unknown reasoning format {name!r}; known formats: {known}")
    return cls()
