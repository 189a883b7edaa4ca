"""The package's functions stay short enough to read in one screen or two: none over 150 lines
(the simulator's loop is split into one function per phase, mltcp.sim.loop)."""

import ast
from pathlib import Path

import mltcp

MAX_LINES = 150
PACKAGE = Path(mltcp.__file__).resolve().parent


def long_functions(root: Path, limit: int = MAX_LINES, pattern: str = "*.py") -> list[str]:
    """'path:line name (n lines)' for every function or method under ``root`` longer than ``limit``."""
    out = []
    for path in sorted(root.rglob(pattern)):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_the_measure_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:5 long ({MAX_LINES + 1} lines)"]


def test_the_fast_simulator_is_in_short_functions():
    from mltcp.cc import LOOP_MODULES

    for module in LOOP_MODULES:
        assert long_functions(PACKAGE / "sim", pattern=f"{module}.py") == []


def test_no_function_in_the_package_is_over_150_lines():
    assert long_functions(PACKAGE) == []
