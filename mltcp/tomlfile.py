"""TOML parsing whose errors name the key and the line.

Python 3.11's ``tomllib`` reports a syntax error as ``Invalid value (at line 6, column 9)`` and a
duplicate key as ``Cannot overwrite a value (at line 6, column 9)`` or, for a key inside an array
of tables, ``(at end of document)``: the key itself is never named. :func:`loads` parses with
tomllib and, on error, re-reads the text line by line to find the key the error is about (the
duplicate, or the key on the line the error points at), then raises :class:`TomlKeyError`, a
``tomllib.TOMLDecodeError`` whose message reads e.g.
``duplicate key jobs[1].name at line 6 (Cannot overwrite a value)``.

Every TOML loader (scenario, topology, tune space, tune cases, switch tables) calls :func:`loads`
in place of ``tomllib.loads``: its ``except tomllib.TOMLDecodeError`` stays as it was.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

_AT = re.compile(r"\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)\s*$")
_HEADER = re.compile(r"^\s*(?P<open>\[\[?)\s*(?P<key>[^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")
_BARE_PART = r'[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY = re.compile(r"^\s*(?P<key>(?:%s)(?:\s*\.\s*(?:%s))*)\s*=" % (_BARE_PART, _BARE_PART))
_PART = re.compile(_BARE_PART)
_STRING = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')


class TomlKeyError(tomllib.TOMLDecodeError):
    """A TOML document that does not parse; ``line`` (1-based, or None) and ``key`` (dotted, with
    array-of-tables indexes, or None) say where."""

    def __init__(self, message: str, line: int | None, key: str | None):
        super().__init__(message)
        self.line, self.key = line, key


@dataclass
class _KeyLine:
    line: int
    key: str  # dotted path, e.g. "switches[0].routes[1].port"
    duplicate: bool  # the path was already defined (a key, or a [table] declared twice)


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


def _render(path: tuple) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + p
    return out


def _scan(text: str) -> list[_KeyLine]:
    """Each key definition and table header in document order, with its full path and whether it
    repeats one already defined. Approximate on purpose (enough to name a key in an error): it
    skips multi-line strings and the continuation lines of multi-line arrays and inline tables."""
    seen: set[tuple] = set()
    arrays: dict[tuple, int] = {}  # array-of-tables path -> index of its current element
    table: tuple = ()
    out: list[_KeyLine] = []
    depth = 0
    # strings blanked (newlines kept), so that multi-line strings, brackets and '#' in strings
    # are not read as keys, arrays or comments; a key itself is read from the original line
    blank = _STRING.sub(lambda m: '""' + "\n" * m.group(0).count("\n"), text).split("\n")
    for n, (raw, orig) in enumerate(zip(blank, text.split("\n")), 1):
        line = raw.split("#", 1)[0]
        if depth > 0:  # inside a multi-line array / inline table
            depth += line.count("[") + line.count("{") - line.count("]") - line.count("}")
            continue
        h = _HEADER.match(line) and _HEADER.match(orig.strip())
        if h:
            base: tuple = ()
            for part in _parts(h.group("key")):
                base += (part,)
                if base in arrays:
                    base += (arrays[base],)
            if h.group("open") == "[[":
                plain = base[:-1] if base and isinstance(base[-1], int) else base
                arrays[plain] = arrays.get(plain, -1) + 1
                table = plain + (arrays[plain],)
                out.append(_KeyLine(n, _render(table), False))
            else:
                table = base
                out.append(_KeyLine(n, _render(table), table in seen))
                seen.add(table)
            continue
        k = _KEY.match(line) and _KEY.match(orig)
        if k:
            path = table + tuple(_parts(k.group("key")))
            out.append(_KeyLine(n, _render(path), path in seen))
            seen.add(path)
            value = line[_KEY.match(line).end() :]
            depth = value.count("[") + value.count("{") - value.count("]") - value.count("}")
    return out


def describe(text: str, err: tomllib.TOMLDecodeError) -> TomlKeyError:
    """``err`` (from tomllib on ``text``) as a :class:`TomlKeyError` naming the key and line."""
    msg = str(err)
    m = _AT.search(msg)
    what = msg[: m.start()] if m else msg
    line = int(m.group("line")) if m and m.group("line") else None
    keys = _scan(text)
    duplicate = what.startswith(("Cannot overwrite", "Cannot declare", "Duplicate"))
    hit = None
    if duplicate:
        dups = [k for k in keys if k.duplicate]
        hit = next((k for k in dups if k.line == line), None) or (dups[0] if dups else None)
    elif line is not None:
        hit = next((k for k in reversed(keys) if k.line == line), None)
    if hit is not None:
        line = hit.line
    where = (
        f"line {line}" + (f", column {m.group('col')}" if m and m.group("col") and int(m.group("line")) == line else "")
        if line
        else "end of document"
    )
    if hit is not None and duplicate:
        text_ = f"duplicate key {hit.key} at {where} ({what})"
    elif hit is not None:
        text_ = f"key {hit.key} at {where}: {what}"
    else:
        text_ = f"{what} at {where}"
    return TomlKeyError(text_, line, hit.key if hit is not None else None)


def loads(text: str) -> dict:
    """``tomllib.loads`` whose error (a :class:`TomlKeyError`) names the key and the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise describe(text, e) from None
