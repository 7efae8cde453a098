"""A JSON value read as it is written, re-written the way `json.dumps(value,
ensure_ascii=False)` writes the whole (OpenAI's `arguments` string as the parsers give it): the
streamed argument fragments of a call add up to its finished `arguments`, whatever spacing or
escapes the model chose. Text is passed on as soon as it cannot change: a string's characters
one by one, a number or `true` / `false` / `null` once its next character ends it, a `\\u`
escape once its four digits (and a surrogate's pair) are in. Anything that is not JSON stops the
reading: what was passed on stays, nothing more comes (the finished call then says what it is).
"""

from __future__ import annotations

import json

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_NUMBER = frozenset("+-0123456789.eE")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_WHITESPACE = frozenset(" \t\r\n")


def _char(c: str) -> str:
    """One decoded string character as json.dumps writes it inside quotes."""
    return json.dumps(c, ensure_ascii=False)[1:-1]


class JsonCanon:
    """Feed the raw text from a value's first character on (each call the whole text so far);
    get back what is new of its canonical form. `done`: the value is closed; `failed`: the text
    is not JSON."""

    def __init__(self) -> None:
        self.pos = 0  # raw characters read
        self.depth = 0  # open objects and arrays
        self.in_string = False
        self.token = ""  # a number, literal or escape not yet finished
        self.high = ""  # a high surrogate waiting for its pair
        self.started = False
        self.done = False
        self.failed = False

    def feed(self, raw: str) -> str:
        out: list[str] = []
        while self.pos < len(raw) and not (self.done or self.failed):
            if not self._step(raw[self.pos], out):
                break  # the character is kept for a later feed (an escape not yet whole)
            self.pos += 1
        return "".join(out)

    def _step(self, c: str, out: list[str]) -> bool:
        """Read one character; False: not consumed (wait for more)."""
        if self.in_string:
            return self._string(c, out)
        if self.token:  # a number or literal: ends at the first character not its own
            if self.token[0] in _LITERALS:
                self.token += c
                word = _LITERALS[self.token[0]]
                if not word.startswith(self.token):
                    self.failed = True
                elif self.token == word:
                    out.append(word)
                    self.token = ""
                    self._close_scalar()
                return True
            if c in _NUMBER:
                self.token += c
                return True
            if not self._number(out):
                return True
        if c in _WHITESPACE:
            return True
        if not self.started:
            self.started = True
        elif self.depth == 0:  # text after the value: not ours
            self.done = True
            return True
        if c in "{[":
            self.depth += 1
            out.append(c)
        elif c in "}]":
            self.depth -= 1
            out.append(c)
            self.done = self.depth == 0
        elif c == ",":
            out.append(", ")
        elif c == ":":
            out.append(": ")
        elif c == '"':
            self.in_string = True
            out.append(c)
        elif c in _NUMBER or c in _LITERALS:
            self.token = c
        else:
            self.failed = True
        return True

    def _number(self, out: list[str]) -> bool:
        try:
            value = json.loads(self.token)
        except json.JSONDecodeError:
            self.failed = True
            return False
        out.append(json.dumps(value))
        self.token = ""
        self._close_scalar()
        return True

    def _close_scalar(self) -> None:
        if self.depth == 0:  # a bare scalar is the whole value
            self.done = True

    def _string(self, c: str, out: list[str]) -> bool:
        if self.token:  # inside an escape
            self.token += c
            if self.token[1] != "u":
                decoded = _ESCAPES.get(self.token[1])
                if decoded is None:
                    self.failed = True
                    return True
                self.token = ""
                self._decoded(decoded, out)
                return True
            if len(self.token) < 6:
                return True
            try:
                code = int(self.token[2:], 16)
            except ValueError:
                self.failed = True
                return True
            self.token = ""
            self._decoded(chr(code), out)
            return True
        if c == "\\":
            self.token = c
            return True
        if c == '"':
            self._flush_high(out)
            self.in_string = False
            out.append(c)
            return True
        if c < " ":  # a raw control character: not JSON
            self.failed = True
            return True
        self._decoded(c, out)
        return True

    def _decoded(self, c: str, out: list[str]) -> None:
        """A string's decoded character; a surrogate pair is joined as json.loads joins it."""
        if self.high:
            if "\udc00" <= c <= "\udfff":
                pair = 0x10000 + ((ord(self.high) - 0xD800) << 10) + ord(c) - 0xDC00
                out.append(_char(chr(pair)))
                self.high = ""
                return
            self._flush_high(out)
        if "\ud800" <= c <= "\udbff":
            self.high = c
            return
        out.append(_char(c))

    def _flush_high(self, out: list[str]) -> None:
        if self.high:
            out.append(_char(self.high))
            self.high = ""
