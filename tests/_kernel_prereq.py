"""Why the kernel-CC tests cannot run on this machine, or None when they can."""

import os
import shutil

from mltcp.traffic.kernel import loader


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not loader.BTF_PATH.exists():
        return "kernel has no BTF (/sys/kernel/btf/vmlinux)"
    for tool in ("clang", "bpftool", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None
