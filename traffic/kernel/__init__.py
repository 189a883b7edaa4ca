"""Kernel MLTCP: MLTCP-Reno and MLTCP-CUBIC as BPF struct_ops congestion control.

    from mltcp.traffic.kernel import load, unload, mark_iteration_start, KernelTransport, Receiver

See docs/kernel.md and docs/design.md ("Kernel MLTCP"). Loading needs root, BTF, clang and bpftool.
"""

from .loader import KernelCCError, available, build, load, registered, status, unload
from .maps import VARIANTS, Config, VariantMaps, mark_iteration_start
from .transport import KERNEL_CCS, KernelTransport, Receiver, tcp_info

__all__ = [
    "KERNEL_CCS",
    "VARIANTS",
    "Config",
    "KernelCCError",
    "KernelTransport",
    "Receiver",
    "VariantMaps",
    "available",
    "build",
    "load",
    "mark_iteration_start",
    "registered",
    "status",
    "tcp_info",
    "unload",
]
