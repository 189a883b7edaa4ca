"""Packaging: `mltcp --version`, and the declared dependencies against what the code imports.

The base install (`pip install .`) must be enough for `mltcp demo` / `mltcp simulate`; every other
third-party module the package imports must come from an extra (or, for Mininet, the system).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Source folders installed as (sub)packages of `mltcp` (pyproject: tool.setuptools.package-dir).
SOURCE_DIRS = sorted({v.split("/")[0] for v in PYPROJECT["tool"]["setuptools"]["package-dir"].values()})
# The modules `mltcp demo` and `mltcp simulate` run: only base dependencies allowed here.
BASE_ONLY_DIRS = ("mltcp", "scenarios")
# Optional sub-commands that live in mltcp/ anyway: file prefix -> the extra whose packages they may import.
OPTIONAL_IN_BASE = {"mltcp/tune": "tune", "mltcp/ddp": "torch", "mltcp/torch": "torch"}
# Optional engines inside mltcp/: module -> the extra that provides it. Allowed in the base code
# only inside functions (`mltcp simulate --engine ns3` imports ns-3; the default engine does not).
OPTIONAL_MODULES = {"ns": "ns3", "cppyy": "ns3", "distributed": "distributed"}
# Third-party modules that are not on PyPI in a usable form and come from the system packages.
SYSTEM_MODULES = {"mininet": "python3-mininet"}
# Declared for the tests but never imported by name (pytest plugins; ruff, which `make test` runs).
PLUGINS = {"pytest-timeout", "ruff"}


def _dist_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    base = {_dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {
        k: {_dist_name(r) for r in v if _dist_name(r) != "mltcp"}
        for k, v in PYPROJECT["project"].get("optional-dependencies", {}).items()
    }
    return base, extras


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, guarded) for every absolute import in a file; guarded = inside a
    function or a try block, i.e. the module imports without it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node, guarded):
        for child in ast.iter_child_nodes(node):
            g = guarded or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try))
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], child.lineno, guarded) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], child.lineno, guarded))
            visit(child, g)

    visit(tree, False)
    return found


def _third_party(dirs) -> dict[str, list[tuple[str, bool]]]:
    local = set(SOURCE_DIRS) | {"mltcp"}
    mods: dict[str, list[tuple[str, bool]]] = {}
    for d in dirs:
        for p in sorted((ROOT / d).rglob("*.py")):
            if "__pycache__" in p.parts:  # generated at run time (numba's cache, the cc dispatch), not source
                continue
            for mod, line, guarded in _imports(p):
                if mod in sys.stdlib_module_names or mod in local or mod == "__future__":
                    continue
                mods.setdefault(mod, []).append((f"{p.relative_to(ROOT)}:{line}", guarded))
    return mods


def _dists_of(mod: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in packages_distributions().get(mod, [])}


def test_version_option_prints_the_installed_version():
    r = subprocess.run([sys.executable, "-m", "mltcp.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"mltcp {PYPROJECT['project']['version']}"


def test_every_third_party_import_is_declared():
    base, extras = _declared()
    runtime = base.union(*(v for k, v in extras.items() if k != "test"))
    problems, unchecked = [], []
    for mod, where in sorted(_third_party(SOURCE_DIRS).items()):
        if mod in SYSTEM_MODULES:
            continue
        dists = _dists_of(mod)
        if not dists:
            # Not installed here, so its distribution cannot be looked up: the package must
            # import without it (the import sits in a function or a try block).
            top_level = [w for w, guarded in where if not guarded]
            if top_level:
                problems.append(f"{mod}: imported at module level ({', '.join(top_level)}) but not installed")
            else:
                unchecked.append(mod)
            continue
        if not dists & runtime:
            hint = " (it is declared for the tests only)" if dists & extras.get("test", set()) else ""
            problems.append(
                f"{mod} ({'/'.join(sorted(dists))}) imported at {where[0][0]} but not declared "
                f"in dependencies or a runtime extra{hint}"
            )
    if unchecked:
        print("not installed here, imported only where optional:", ", ".join(unchecked))
    assert not problems, "\n".join(problems)


def test_base_code_imports_only_base_dependencies():
    base, extras = _declared()
    problems = []
    for mod, where in sorted(_third_party(BASE_ONLY_DIRS).items()):
        dists = _dists_of(mod)
        if mod in OPTIONAL_MODULES and all(guarded for _, guarded in where):
            continue
        where = [
            (w, g)
            for w, g in where
            if not any(
                w.startswith(pre) and dists & extras.get(extra, set()) for pre, extra in OPTIONAL_IN_BASE.items()
            )
        ]
        if where and not dists & base:
            problems.append(f"{mod} imported at {where[0][0]}: not a base dependency ({', '.join(sorted(base))})")
    assert not problems, "\n".join(problems)


def test_every_declared_dependency_is_used():
    """A dependency nothing imports (pyroute2 once was) is dead weight for every user."""
    base, extras = _declared()
    used_by_package = {d for mod in _third_party(SOURCE_DIRS) for d in _dists_of(mod)}
    used_by_tests = {d for mod in _third_party(["tests"]) for d in _dists_of(mod)}
    unused = sorted(d for d in base.union(*(v for k, v in extras.items() if k != "test")) if d not in used_by_package)
    unused += sorted(d for d in extras.get("test", set()) - PLUGINS if d not in used_by_tests | used_by_package)
    assert not unused, f"declared but never imported: {unused}"


def test_system_modules_come_from_the_install_script():
    script = (ROOT / "scripts" / "install-system.sh").read_text()
    for mod, pkg in SYSTEM_MODULES.items():
        assert re.search(rf"\b{re.escape(pkg.removeprefix('python3-'))}\b", script), (mod, pkg)


_BLOCKER = r"""
import sys
BLOCKED = set(sys.argv[1].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, Blocker())
from mltcp.cli import main
sys.argv = ["mltcp"] + sys.argv[2:]
main()
"""

_TINY = """
name = "tiny"
iterations = 3
warmup_iterations = 1
[[links]]
name = "l"
rate_gbps = 1.0
delay_us = 50
buffer_pkts = 100
[[jobs]]
name = "A"
compute_ms = 2
bytes = 100_000
path = ["l"]
"""


def _optional_modules() -> list[str]:
    """Import names of every distribution that only an extra brings (and Mininet)."""
    base, extras = _declared()
    only_extra = set().union(*extras.values()) - base
    mods = {
        m
        for m, ds in packages_distributions().items()
        if {d.lower().replace("_", "-") for d in ds} & only_extra and not m.startswith("_")
    }
    return sorted(mods | set(SYSTEM_MODULES))


def _run_without_extras(*args):
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER, ",".join(_optional_modules()), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_base_install_runs_the_cli_and_the_simulator(tmp_path):
    """With every extra's modules made unimportable, `mltcp` starts, lists and simulates."""
    assert "grpc" in _optional_modules() and "p4runtime_sh" in _optional_modules()
    for args in (["--help"], ["--version"], ["scenarios"]):
        r = _run_without_extras(*args)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    sc = tmp_path / "tiny.toml"
    sc.write_text(_TINY)
    r = _run_without_extras("simulate", str(sc), "--compare", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"speedup_avg"' in r.stdout


def test_a_part_without_its_extra_names_the_extra():
    r = _run_without_extras("switch", "counters", "--json")
    assert r.returncode == 2
    assert "pip install 'mltcp[switch]'" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run_without_extras("--help")
    assert "mltcp[switch]" in r.stdout


@pytest.mark.parametrize("extra", ["switch", "emulate", "kernel", "test"])
def test_makefile_installs_every_extra_the_tests_need(extra):
    makefile = (ROOT / "Makefile").read_text()
    m = re.search(r"pip install -q -e '\.\[([a-z0-9,-]+)\]'", makefile)
    assert m, "the Makefile's editable install line"
    assert extra in m.group(1).split(",")


def test_emulate_without_mininet_names_the_system_packages():
    r = _run_without_extras("emulate", "two-jobs", "--json")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "mininet" in r.stderr and "scripts/install-system.sh" in r.stderr
    assert "Traceback" not in r.stderr


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    spans = re.findall(r"`(mltcp [^`]+)`", text)
    blocks = re.findall(r"```\n(.*?)```", text, flags=re.S)
    lines = [ln.split("#")[0].strip() for b in blocks for ln in b.splitlines()]
    lines = [re.sub(r"^\S*/bin/", "", ln) for ln in lines]
    return sorted({s for s in spans + lines if s.startswith("mltcp ")})


def test_readme_commands_and_options_exist():
    """Every `mltcp ...` the README shows resolves to a real command, and its --options exist."""
    import typer

    from mltcp import cli

    cli._mount_optional()
    root = typer.main.get_command(cli.app)
    commands = _readme_commands()
    assert len(commands) >= 10, commands
    problems = []
    for line in commands:
        for i, alt in enumerate(line.split(" / ")):  # `mltcp switch push / install / set-ecn`
            words = alt.split() if i == 0 else line.split()[:2] + alt.split()
            cmd, path = root, ["mltcp"]
            for w in words[1:]:
                if not hasattr(cmd, "commands") or w.startswith("-") or w == "&&":
                    break
                sub = cmd.commands.get(w) or (
                    cmd.commands.get("run") if not re.fullmatch(r"[a-z][a-z0-9-]*", w) else None
                )
                if sub is None:
                    problems.append(f"{alt!r}: no command {w!r} under {' '.join(path)}")
                    break
                cmd, path = sub, path + ([w] if sub.name == w else [])
            if "not available" in (cmd.help or ""):
                pytest.skip(f"{' '.join(path)} is not installed here: {cmd.help}")
            opts = {o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
            opts |= {o for p in root.params for o in p.opts}
            for w in words:
                if w.startswith("--") and w.split("=")[0] not in opts:
                    problems.append(f"{alt!r}: {' '.join(path)} has no option {w}")
    assert not problems, "\n".join(problems)
