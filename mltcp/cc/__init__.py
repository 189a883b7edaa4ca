"""One congestion-control core for the simulator and the real senders (see :mod:`.base`)."""
from .base import TX_START, CaState, CongestionOps, FlowState, Param
from .cubic import Cubic
from .dcqcn import Dcqcn
from .mltcp import Linear, MLTCPCubic, MLTCPDcqcn, MLTCPHook, MLTCPReno
from .reno import Reno

ALGORITHMS = {c.name: c for c in (Reno, Cubic, Dcqcn, MLTCPReno, MLTCPCubic, MLTCPDcqcn)}
BASE_OF = {"mltcp-reno": "reno", "mltcp-cubic": "cubic", "mltcp-dcqcn": "dcqcn"}


def make_cc(name: str, **params) -> CongestionOps:
    """Build an algorithm by name with its declared parameters (``ALGORITHMS[name].params``);
    MLTCP variants take slope, intercept, scale_decrease, idle_fraction, min_idle and an optional
    ``aggressiveness`` callable on top of their base algorithm's."""
    try:
        cls = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; choose from {', '.join(ALGORITHMS)}") from None
    return cls(**params)


__all__ = ["ALGORITHMS", "BASE_OF", "CaState", "CongestionOps", "Cubic", "Dcqcn", "FlowState", "Linear",
           "MLTCPCubic", "MLTCPDcqcn", "MLTCPHook", "MLTCPReno", "Param", "Reno", "TX_START", "make_cc"]
