"""Every `STEPWISE_*` setting: declared once, beside the config field it fills, read once per
process (docs/configuration.md).

A setting is a field of a concern's config dataclass, declared with `setting(...)`: its
variable name, its default (the field's), its choices and help sit beside the field, and the
class is registered with `@declared`. Everything else is derived from that one declaration:
the variable table (`declared_vars`), `stepwise config`, the CLI flags of `stepwise up` /
`stepwise worker` (a setting with a `flag`), the type a value is parsed as, and each config
(`build(cls)`: every declared field from the settings). Each package builds its own config;
this module imports none of them (the CLI imports every declaring module before it loads the
settings: pipeline/cli/declarations.py).

A process builds one `Settings` at the CLI (flags, then the environment, then the defaults),
installs it (`install`), and passes the concern configs it builds down; the few process-wide
switches deep in the engine read `pipeline.config.runtime()`, built once from `current()`.
`current()` is the installed object, or one built from the environment on first use by a
library caller (a bench, a test) that has no CLI.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

PREFIX = "STEPWISE_"
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
T = TypeVar("T")


def parse_bool(raw: str) -> bool:
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


KIND_NAMES = {int: "an integer", float: "a number", parse_bool: "a boolean"}


@dataclass(frozen=True, slots=True)
class Var:
    """One setting: `STEPWISE_<name>`, its default (as written in the environment; empty:
    unset), its concern, its help, how a value is parsed."""

    name: str
    default: str
    concern: str
    help: str
    kind: Callable[[str], object] = str
    choices: tuple[str, ...] = ()
    secret: bool = False  # `stepwise config` shows that it is set, not its value
    flag: str | None = None  # `stepwise up` / `stepwise worker` take it as this flag

    @property
    def env(self) -> str:
        return PREFIX + self.name

    def parse(self, raw: str) -> object:
        """The typed value; a bad one is a ValueError that names the variable."""
        if self.choices and raw.strip().lower() not in self.choices:
            raise ValueError(f"{self.env}={raw!r}: expected one of {', '.join(self.choices)}")
        try:
            return self.kind(raw.strip().lower() if self.choices else raw)
        except ValueError as e:
            kind = KIND_NAMES.get(self.kind, "a valid value")
            raise ValueError(f"{self.env} must be {kind}, got {raw!r} ({e})") from None


_VAR = "stepwise_setting"


def setting(
    default: Any = None,
    *,
    env: str,
    concern: str,
    help: str,  # noqa: A002 - the word the declaration reads with
    kind: Callable[[str], object] | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
    flag: str | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A config dataclass field that is a `STEPWISE_<env>` setting. `default` is the field's
    default (None: unset); `kind` parses the environment's text (default: the default's type);
    `factory` gives a mutable default (a dict) whose setting is unset by default."""
    if kind is None:
        kind = str if default is None else type(default)
        kind = parse_bool if kind is bool else kind
    shown = "" if default is None or factory is not None else _raw(default)
    var = Var(env, shown, concern, help, kind, tuple(choices), secret, flag)
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={_VAR: var})
    return dataclasses.field(default=default, metadata={_VAR: var})


_DECLARED: dict[str, Var] = {}


def declared(cls: type[T]) -> type[T]:
    """Register a config dataclass's settings (a class decorator, under @dataclass)."""
    for _, v in fields_of(cls):
        seen = _DECLARED.get(v.name)
        if seen is not None and seen != v:
            raise ValueError(f"{v.env} is declared twice, differently")
        _DECLARED[v.name] = v
    return cls


def fields_of(cls: type) -> list[tuple[str, Var]]:
    """(field name, Var) of every setting a config dataclass declares."""
    return [(f.name, f.metadata[_VAR]) for f in dataclasses.fields(cls) if _VAR in f.metadata]


def declared_vars() -> tuple[Var, ...]:
    """Every setting declared so far, in declaration order."""
    return tuple(_DECLARED.values())


def var(name: str) -> Var:
    try:
        return _DECLARED[name]
    except KeyError:
        raise KeyError(f"{PREFIX}{name} is not a declared setting") from None


# Read by the set-up scripts and the test suite, not by the pipeline: known, so not reported.
ELSEWHERE = {
    "TEST_SERVICES": "tests: auto | docker | embedded (tests/service_plan.py)",
    "TEST_KAFKA": "tests: a Kafka to run the integration suite on",
    "TEST_REDIS": "tests: a Redis to run the integration suite on",
    "TEST_ARTIFACTS": "tests: where integration tests keep their logs",
    "SKIP_VLLM": "scripts/setup.sh: skip the vLLM venv",
    "WITH_VLLM": "scripts/setup.sh: build the vLLM venv too (scripts/test.sh sets it)",
    "VLLM_VENV": "scripts/setup.sh: where the vLLM venv goes",
    "TORCH_VERSION": "scripts/setup.sh: the torch pinned",
    "TEST_MOONCAKE": "tests: 1 fails the mooncake tests where the wheel is missing (else skip)",
    "BIND": "docker-compose.yml: the host address its published ports bind (127.0.0.1)",
}


class Settings:
    """The effective settings of one process: flags over the environment over the defaults,
    parsed by the declared settings (when first read; `validate` reads them all)."""

    def __init__(self, env: Mapping[str, str], flags: Mapping[str, object] | None = None):
        self._env = {k: v for k, v in env.items() if k.startswith(PREFIX)}
        self._flags = {k: v for k, v in (flags or {}).items() if v is not None}
        self._values: dict[str, object] = {}

    @classmethod
    def load(
        cls, env: Mapping[str, str] | None = None, flags: Mapping[str, object] | None = None
    ) -> Settings:
        """Flags (None: not given) over the environment (empty: unset) over the defaults; every
        setting declared so far is parsed now, so a bad value fails here, named."""
        s = cls(os.environ if env is None else env, flags)
        s.validate()
        return s

    def validate(self) -> None:
        for v in declared_vars():
            self[v.name]

    def __getitem__(self, name: str) -> object:
        if name not in self._values:
            v = var(name)
            if name in self._flags:  # a flag's text is parsed as the environment's would be
                value = self._flags[name]
                value = v.parse(value) if isinstance(value, str) else value
            elif self._env.get(v.env):
                value = v.parse(self._env[v.env])
            else:
                value = v.parse(v.default) if v.default else None
            self._values[name] = value
        return self._values[name]

    def source(self, name: str) -> str:
        var(name)
        if name in self._flags:
            return "flag"
        return "env" if self._env.get(PREFIX + name) else "default"

    @property
    def unknown(self) -> tuple[str, ...]:
        known = set(_DECLARED) | set(ELSEWHERE)
        return tuple(sorted(k for k in self._env if k[len(PREFIX) :] not in known))

    # -- what is shown and handed on ----------------------------------------------------
    def child_env(self, base: Mapping[str, str] | None = None, **values: object) -> dict[str, str]:
        """An environment for a child process: `base` (default ours) with every setting not at
        its default written out, and `values` on top, so a child builds the same settings."""
        env = dict(os.environ if base is None else base)
        for v in declared_vars():
            if self.source(v.name) != "default":
                env[v.env] = _raw(self[v.name])
        env.update({PREFIX + k: _raw(v) for k, v in values.items()})
        return env

    def rows(self) -> list[dict[str, str]]:
        """One row per setting for `stepwise config`: variable, value shown, source, help."""
        out = []
        for v in declared_vars():
            value = self[v.name]
            shown = _raw(value) if value is not None else ""
            if v.secret and shown:
                shown = "(set)"
            out.append({
                "variable": v.env, "value": shown, "source": self.source(v.name),
                "concern": v.concern, "help": v.help,
            })  # fmt: skip
        return out

    def unknown_report(self) -> list[str]:
        """One line per unknown `STEPWISE_*` variable, with the nearest known name."""
        known = [v.env for v in declared_vars()] + [PREFIX + k for k in ELSEWHERE]
        lines = []
        for name in self.unknown:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            lines.append(f"unknown setting {name} is ignored{hint}")
        return lines


def build(cls: type[T], source: Settings | None = None, **overrides: object) -> T:
    """A config dataclass from the settings: every field it declares as a setting that is set
    (else the field's default), `overrides` on top."""
    source = source or current()
    values = {}
    for name, v in fields_of(cls):
        value = source[v.name]
        if value is not None:
            values[name] = value
    return cls(**(values | overrides))


def _raw(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)


_installed: Settings | None = None


def install(settings: Settings | None) -> None:
    """This process's settings from now on (None: rebuilt from the environment on next use)."""
    global _installed
    _installed = settings


def current() -> Settings:
    """The installed settings, else the environment's (built once, then kept)."""
    global _installed
    if _installed is None:
        _installed = Settings.load()
    return _installed
