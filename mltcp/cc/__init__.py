"""One congestion-control core for the simulator and the real senders (see :mod:`.base`)."""
import hashlib
import os
from pathlib import Path

import numba


LOOP_MODULES = ("engine", "loop", "queues", "recovery", "state")   # mltcp/sim modules with compiled code


def _jit_cache_dir() -> str:
    """Where numba keeps the compiled kernels and the simulator's loop.

    numba's on-disk cache checks only the file of the function it compiled, not the files of the
    functions it calls, so after an edit of a CC kernel the simulator's cached loop would keep
    running the old one. The cache directory is therefore named by a hash of every source whose
    code ends up in it (mltcp/cc, mltcp/tracker.py, the simulator's loop modules): any edit compiles afresh."""
    pkg = Path(__file__).resolve().parent.parent
    files = sorted(pkg.glob("cc/*.py")) + [pkg / "tracker.py"] + [pkg / "sim" / f"{m}.py" for m in LOOP_MODULES]
    digest = hashlib.sha1(b"".join(f.read_bytes() for f in files if f.exists())).hexdigest()[:12]
    base = os.environ.get("NUMBA_CACHE_DIR") or str(pkg / "__pycache__")
    if not os.access(base if os.path.isdir(base) else os.path.dirname(base), os.W_OK):
        base = os.path.join(os.path.expanduser("~"), ".cache", "mltcp")
    return os.path.join(base, f"jit-{digest}")


numba.config.CACHE_DIR = _jit_cache_dir()

from .base import TX_START, CaState, CongestionOps, FlowState, Param
from .cubic import Cubic
from .dcqcn import Dcqcn
from .dctcp import Dctcp
from .mltcp import Linear, MLTCPCubic, MLTCPDcqcn, MLTCPDctcp, MLTCPHook, MLTCPReno
from .reno import Reno

ALGORITHMS = {c.name: c for c in (Reno, Cubic, Dcqcn, Dctcp, MLTCPReno, MLTCPCubic, MLTCPDcqcn, MLTCPDctcp)}
BASE_OF = {"mltcp-reno": "reno", "mltcp-cubic": "cubic", "mltcp-dcqcn": "dcqcn", "mltcp-dctcp": "dctcp"}
BASES = tuple(n for n in ALGORITHMS if n not in BASE_OF)   # the base algorithms: reno, cubic, dcqcn, dctcp


def make_cc(name: str, **params) -> CongestionOps:
    """Build an algorithm by name with its declared parameters (``ALGORITHMS[name].params``);
    MLTCP variants take slope, intercept, scale_decrease, idle_fraction, min_idle and an optional
    ``aggressiveness`` callable on top of their base algorithm's."""
    try:
        cls = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; choose from {', '.join(ALGORITHMS)}") from None
    return cls(**params)


__all__ = ["ALGORITHMS", "BASES", "BASE_OF", "CaState", "CongestionOps", "Cubic", "Dcqcn", "Dctcp", "FlowState",
           "Linear", "MLTCPCubic", "MLTCPDcqcn", "MLTCPDctcp", "MLTCPHook", "MLTCPReno", "Param", "Reno", "TX_START", "make_cc"]
