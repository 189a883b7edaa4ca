"""Where p4c and BMv2 come from: one resolver for the tests, the CLI and the emulation.

Order (first hit wins):

1. ``MLTCP_P4TOOLS``: a p4tools folder (``bin/``, ``fast/bin/``, ``share/p4c/tna``) given
   explicitly;
2. ``<checkout>/.tools/p4tools``: where ``scripts/install-system.sh`` unpacks the prebuilt
   tarball from ``../shared/tools`` (git-ignored);
3. ``PATH`` (p4lang's Ubuntu packages, e.g. the Vagrant VM).

BMv2 comes in two builds in the p4tools folder: ``bin/`` with logging macros (``--log-console``
for debugging) and ``fast/bin/`` without them (``-O3``, for emulation and measurement).
``bmv2_switch(fast=True)`` picks the fast one where it exists.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV = "MLTCP_P4TOOLS"
CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = CHECKOUT / ".tools" / "p4tools"

P4C_TOOLS = ("p4c", "p4c-bm2-ss", "p4test")
BMV2_TOOLS = ("simple_switch", "simple_switch_grpc", "simple_switch_CLI")


class ToolNotFound(RuntimeError):
    """A p4c/BMv2 program is in none of the places :func:`find` looks."""


def p4tools_dir() -> Path | None:
    """The p4tools folder in use (``MLTCP_P4TOOLS``, else the checkout's), or None."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    return DEFAULT_DIR if DEFAULT_DIR.is_dir() else None


def find(name: str, fast: bool = False) -> str | None:
    """Absolute path of tool ``name`` (``fast``: the BMv2 build without logging, if any)."""
    d = p4tools_dir()
    if d is not None:
        for sub in ("fast/bin", "bin") if fast else ("bin",):
            p = d / sub / name
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
        if os.environ.get(ENV):  # an explicit folder that lacks the tool: do not fall back silently
            return None
    return shutil.which(name)


def require(name: str, fast: bool = False) -> str:
    p = find(name, fast)
    if p is None:
        raise ToolNotFound(f"{name} not found: {where()}")
    return p


def where() -> str:
    """Where the resolver looked (for skip reasons and error messages)."""
    env = os.environ.get(ENV)
    if env:
        return f"{ENV}={env}"
    return (
        f"looked in {DEFAULT_DIR} (run `make system` with ../shared/tools/"
        "p4tools-debian12-amd64.tar.gz beside the checkout) and on PATH"
    )


def missing(*names: str) -> list[str]:
    """The tools of ``names`` that cannot be found."""
    return [n for n in names if find(n) is None]


def why_missing(*names: str) -> str | None:
    """None if every tool is found, else a reason naming the missing ones (for pytest skips)."""
    m = missing(*names)
    return None if not m else f"{', '.join(m)} not found ({where()})"


def tna_include() -> str | None:
    """The folder holding tna.p4 / t2na.p4 (p4tools' share/p4c/tna), or None."""
    d = p4tools_dir()
    cands = [d / "share" / "p4c" / "tna"] if d else []
    p4c = find("p4c")
    if p4c:
        cands.append(Path(p4c).resolve().parents[1] / "share" / "p4c" / "tna")
    for c in cands:
        if (c / "tna.p4").is_file():
            return str(c)
    return None


def bmv2_switch(fast: bool = True) -> str:
    """simple_switch_grpc: the fast build for emulation/measurement unless ``fast=False``."""
    return require("simple_switch_grpc", fast)


def switch_cli() -> str:
    return require("simple_switch_CLI")


def compile_v1model(
    p4: str | Path, out_dir: str | Path, p4info: str | Path | None = None, timeout: float = 300
) -> Path:
    """p4c-bm2-ss on a v1model program: returns the BMv2 JSON path (and writes P4Info if asked)."""
    import subprocess

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / (Path(p4).stem + ".json")
    cmd = [require("p4c-bm2-ss"), "--arch", "v1model", "-o", str(js)]
    if p4info:
        cmd += ["--p4runtime-files", str(p4info)]
    r = subprocess.run(cmd + [str(p4)], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"p4c-bm2-ss {p4} failed (rc {r.returncode}): {r.stderr.strip()[-2000:]}")
    return js
