"""One congestion-control core for the simulator and the real senders (see :mod:`.base`)."""

import hashlib
import os
from pathlib import Path

import numba


LOOP_MODULES = ("engine", "loop", "queues", "recovery", "state")  # mltcp/sim modules with compiled code


def _jit_cache_dir() -> str:
    """Where numba keeps the compiled kernels and the simulator's loop.

    numba's on-disk cache checks only the file of the function it compiled, not the files of the
    functions it calls, so after an edit of a CC kernel the simulator's cached loop would keep
    running the old one. The cache directory is therefore named by a hash of every source whose
    code ends up in it (mltcp/cc, mltcp/tracker.py, engage.py and defaults.py, the simulator's loop
    modules, the algorithm files of MLTCP_CC_PATH): any edit compiles afresh."""
    from .registry import plugin_files

    pkg = Path(__file__).resolve().parent.parent
    files = sorted(pkg.glob("cc/*.py")) + [pkg / "tracker.py", pkg / "engage.py", pkg / "defaults.py"]
    files += [pkg / "sim" / f"{m}.py" for m in LOOP_MODULES]
    files += plugin_files()
    digest = hashlib.sha1(b"".join(str(f).encode() + f.read_bytes() for f in files if f.exists())).hexdigest()[:12]
    base = os.environ.get("NUMBA_CACHE_DIR") or str(pkg / "__pycache__")
    if not os.access(base if os.path.isdir(base) else os.path.dirname(base), os.W_OK):
        base = os.path.join(os.path.expanduser("~"), ".cache", "mltcp")
    return os.path.join(base, f"jit-{digest}")


numba.config.CACHE_DIR = _jit_cache_dir()

from . import registry  # noqa: E402
from .base import KINDS, REGISTRY, TX_START, CaState, CongestionOps, FlowState, Ops, Param  # noqa: E402

registry.load_algorithms()
from .mltcp import Linear, MLTCPHook, variant_of  # noqa: E402

BASES = tuple(cls.name for cls in KINDS)  # the base algorithms, in the order they were found
for _base in KINDS:
    variant_of(_base)
ALGORITHMS = dict(REGISTRY)  # every algorithm by name: the bases and their MLTCP variants
BASE_OF = {n: c.base_algorithm().name for n, c in ALGORITHMS.items() if issubclass(c, MLTCPHook)}
dispatch = registry.load_dispatch(numba.config.CACHE_DIR)  # the simulator's per-kind branches (generated)

from .cubic import Cubic  # noqa: E402
from .dcqcn import Dcqcn  # noqa: E402
from .dctcp import Dctcp  # noqa: E402
from .mltcp import MLTCPCubic, MLTCPDcqcn, MLTCPDctcp, MLTCPReno  # noqa: E402
from .reno import Reno  # noqa: E402


def make_cc(name: str, **params) -> CongestionOps:
    """Build an algorithm by name with its declared parameters (``ALGORITHMS[name].params``);
    MLTCP variants take slope, intercept, scale_decrease, idle_fraction, min_idle and an optional
    ``aggressiveness`` callable on top of their base algorithm's."""
    try:
        cls = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; choose from {', '.join(ALGORITHMS)}") from None
    return cls(**params)


__all__ = [
    "ALGORITHMS",
    "BASES",
    "BASE_OF",
    "CaState",
    "CongestionOps",
    "Cubic",
    "Dcqcn",
    "Dctcp",
    "FlowState",
    "Linear",
    "MLTCPCubic",
    "MLTCPDcqcn",
    "MLTCPDctcp",
    "MLTCPHook",
    "MLTCPReno",
    "Ops",
    "Param",
    "Reno",
    "TX_START",
    "dispatch",
    "make_cc",
]
