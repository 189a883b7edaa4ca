"""The command-line tools' two rich consoles (``out``: results on stdout, ``err``: progress and
errors on stderr), their one way to fail: ``error: <message>`` on stderr, then a non-zero exit,
and their one way to print JSON.

The convention of every command (``mltcp simulate``, ``emulate``, ``traffic``, ``kernel``, ``switch``,
``tune``): ``--json`` prints exactly one JSON document on stdout (:func:`print_json`) and nothing
else there (progress and notes go to stderr); without it the command prints tables. A run's
report names its arms ``baseline`` (the congestion control asked for) and ``mltcp`` (its MLTCP
variant with ``--compare``, else null). Exit codes: 0 done, 1 the run failed, 2 bad input (file,
option or field named), 130 interrupted (Ctrl-C; typer maps KeyboardInterrupt to 130).
The one stream: ``mltcp switch watch --json`` prints one JSON document per poll, one per line.

Messages are printed as they are, not as rich markup, so the names they quote survive: a TOML
table such as ``[[switches.routes]]`` or a note such as ``[flow 0: ...]`` would otherwise be
taken for a style tag and vanish. They are not wrapped either, so a long message stays one line
for scripts that grep it."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

out = Console()
err = Console(stderr=True)


def error_exit(msg: str, code: int = 2) -> typer.Exit:
    """Print ``error: msg`` on stderr and return the ``typer.Exit`` for the caller to raise."""
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print ``error: msg`` on stderr and exit with ``code`` (2: bad input, 1: the run failed)."""
    raise error_exit(msg, code)


def print_json(doc) -> None:
    """The ``--json`` output: one JSON document on one line of stdout (numpy numbers as floats), so
    ``json.loads`` of stdout and of its last line both read it."""
    sys.stdout.write(json.dumps(doc, default=float) + "\n")
    sys.stdout.flush()
