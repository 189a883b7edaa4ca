"""Where the algorithms come from, and how the simulator's compiled loop reaches their kernels.

An algorithm is one module: a :class:`~mltcp.cc.base.CongestionOps` subclass with its ``name``,
``Param`` attributes, ``State`` and ``ops`` (:class:`~mltcp.cc.base.Ops`). Defining the class
registers it (``base.REGISTRY``; an algorithm with kernels of its own also gets a ``kind``, its
index in ``base.KINDS``). :func:`load_algorithms` imports every module of this package and every
``*.py`` file in the directories listed in ``MLTCP_CC_PATH`` (``os.pathsep``-separated), so a new
algorithm is a new file and nothing else. Each base algorithm gets its MLTCP variant
(:func:`mltcp.cc.mltcp.variant_of`).

numba compiles calls statically, so the loop cannot look a kernel up at run time: it calls
``dispatch.<hook>(kind, ...)``, one function per hook with one branch per kind that implements it,
generated from ``KINDS`` by :func:`dispatch_source` into a file of numba's cache directory (named
by a hash of its text, so numba caches it like any module) and imported by :func:`load_dispatch`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from .base import KINDS

PATH_VARIABLE = "MLTCP_CC_PATH"
INFRASTRUCTURE = {"base", "registry", "mltcp"}  # modules of this package that are not algorithms
PLUGIN_PREFIX = "mltcp_cc_plugin_"

# hook -> the kernel's arguments after (p, tcp, ca, i); the dispatcher takes ``kind`` first
HOOKS = {
    "init": "now",
    "pkts_acked": "acked, rtt, now, mss",
    "in_ack_event": "acked, ce, rtt, now, mss",
    "cong_avoid": "acked, gain, now, mss",
    "on_congestion": "ecn, now, dscale, mss",
    "on_timeout": "now, dscale, mss",
    "on_cnp": "now, dscale",
    "on_timer": "now, gain",
    "on_sent": "sent, now, gain",
}


def plugin_files() -> list[Path]:
    """The algorithm files of ``MLTCP_CC_PATH``'s directories (a listed file counts too)."""
    out = []
    for entry in filter(None, os.environ.get(PATH_VARIABLE, "").split(os.pathsep)):
        p = Path(entry)
        out += sorted(p.glob("*.py")) if p.is_dir() else [p] if p.suffix == ".py" else []
    return out


def load_algorithms() -> None:
    """Import the package's algorithm modules, then the plugin files (registering them)."""
    package = Path(__file__).resolve().parent
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda m: m.name):
        if info.name not in INFRASTRUCTURE and not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")
    for path in plugin_files():
        name = PLUGIN_PREFIX + path.stem.replace("-", "_")
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules[name]
            raise


def _kernel_import(fn) -> tuple[str, str]:
    py = getattr(fn, "py_func", fn)
    return py.__module__, py.__name__


def dispatch_source(kinds=None) -> str:
    """The text of the dispatch module for ``kinds`` (default: every algorithm registered)."""
    kinds = KINDS if kinds is None else kinds
    imports, bodies = ["from numba import njit", "", "from mltcp.cc.base import cwnd_restart"], []
    for hook, args in HOOKS.items():
        lines = ["@njit(cache=True)", f"def {hook}(kind, p, tcp, ca, i, {args}):"]
        branches = [(k, cls.ops.implemented()[hook]) for k, cls in enumerate(kinds) if hook in cls.ops.implemented()]
        for n, (k, fn) in enumerate(branches):
            module, fname = _kernel_import(fn)
            imports.append(f"from {module} import {fname} as k{k}_{hook}")
            lines += [
                f"    {'if' if n == 0 else 'elif'} kind == {k}:   # {kinds[k].name}",
                f"        k{k}_{hook}(p, tcp, ca, i, {args})",
            ]
        bodies.append("\n".join(lines + (["    pass"] if not branches else [])))
    lines = [
        "@njit(cache=True)",
        "def tx_start(kind, p, tcp, ca, i, now, idle, rto, mss, restart):",
        '    """TX_START after ``idle`` s: restart after idle (window-based), then the algorithm\'s cwnd_event."""',
    ]
    for k, cls in enumerate(kinds):
        ops = cls.ops.implemented()
        body = ["        if restart:", "            cwnd_restart(tcp, i, idle, rto, mss)"] if cls.window_based else []
        if "cwnd_event" in ops:
            module, fname = _kernel_import(ops["cwnd_event"])
            imports.append(f"from {module} import {fname} as k{k}_cwnd_event")
            body.append(f"        k{k}_cwnd_event(p, tcp, ca, i, now, idle)")
        if body:
            lines += [f"    {'if' if len(lines) == 3 else 'elif'} kind == {k}:   # {cls.name}"] + body
    bodies.append("\n".join(lines + (["    pass"] if len(lines) == 3 else [])))
    head = '"""Generated by mltcp.cc.registry from the registered algorithms: do not edit."""'
    return head + "\n" + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(bodies) + "\n"


def load_dispatch(folder: str, kinds=None):
    """Write (once) and import the dispatch module for ``kinds`` in ``folder``."""
    text = dispatch_source(kinds)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = Path(folder) / f"cc_dispatch_{digest}.py"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # another process writing the same text at once is harmless
    name = f"{__package__}.cc_dispatch_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
