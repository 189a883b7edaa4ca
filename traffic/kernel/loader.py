"""Build, register, configure and remove the BPF congestion controls, with clang and bpftool.

build: vmlinux.h from the running kernel's BTF (bpftool), then clang -O2 -g -target bpf for each
variant, into a cache directory (never the source tree). load: ``bpftool struct_ops register``,
then the configuration is written into the variant's cfg map. unload: ``bpftool struct_ops
unregister``. Every step checks its preconditions and raises :class:`KernelCCError` with the reason.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from importlib import resources
from pathlib import Path

from .maps import (
    ABOVE_BDP_DEFAULT,
    FLAG_ADAPTIVE,
    FLAG_NIC_CAP,
    FLAG_SCALE_DECREASE,
    VARIANTS,
    Config,
    MapsError,
    VariantMaps,
    _bpftool_json,
    close_cached,
    find_maps,
)

BTF_PATH = Path("/sys/kernel/btf/vmlinux")
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
SOURCES = ("mltcp_cc.bpf.h", "mltcp_reno.bpf.c", "mltcp_cubic.bpf.c")
_ARCH = {"x86_64": "x86", "aarch64": "arm64"}


class KernelCCError(RuntimeError):
    """A precondition or a step failed; the message says which and why."""


def cache_dir() -> Path:
    base = os.environ.get("MLTCP_BPF_CACHE")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mltcp" / "bpf"
    return root / platform.release()


def source_dir() -> Path:
    return Path(str(resources.files("mltcp.traffic.kernel")))


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise KernelCCError(f"{what}: {cmd[0]} not found on PATH (install it: scripts/install-system.sh)") from None
    if res.returncode != 0:
        msg = (res.stderr.strip() or res.stdout.strip()).splitlines()
        tail = "\n".join(msg[-15:])
        raise KernelCCError(f"{what} failed ({' '.join(cmd[:3])} ... exit {res.returncode}):\n{tail}")
    return res


def require_tools(*tools: str) -> None:
    for t in tools:
        if shutil.which(t) is None:
            raise KernelCCError(f"{t} not found on PATH (install it: scripts/install-system.sh)")


def require_btf() -> None:
    if not BTF_PATH.exists():
        raise KernelCCError(
            f"{BTF_PATH} missing: the kernel has no BTF (CONFIG_DEBUG_INFO_BTF), "
            "BPF congestion control cannot be built or loaded"
        )


def require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise KernelCCError(f"{action} needs root (CAP_BPF and CAP_NET_ADMIN); run it with sudo")


def require_struct_ops() -> None:
    try:
        _bpftool_json("struct_ops", "list")
    except MapsError as e:
        raise KernelCCError(f"struct_ops not usable here: {e}") from None


def check_variants(variants: list[str] | tuple[str, ...]) -> list[str]:
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise KernelCCError(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    return list(dict.fromkeys(variants))


def clang_argv(clang: str, c_file: Path, obj: Path, *extra: str) -> list[str]:
    """``clang -O2 -g -target bpf -D__TARGET_ARCH_<arch> EXTRA... -c C_FILE -o OBJ``: the BPF compile
    line ``build`` and tcprog.build share; ``extra`` is what differs (include dirs, defines)."""
    arch = _ARCH.get(platform.machine(), platform.machine())
    return [clang, "-O2", "-g", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", *extra, "-c", str(c_file), "-o", str(obj)]


def build(
    variants=tuple(VARIANTS), out_dir: Path | None = None, clang: str = "clang", force: bool = False
) -> dict[str, Path]:
    """Compile the variants; returns variant -> object file. Rebuilds only what is out of date."""
    variants = check_variants(variants)
    require_tools(clang, "bpftool")
    require_btf()
    out = Path(out_dir) if out_dir else cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    vmlinux_h = out / "vmlinux.h"
    if force or not vmlinux_h.exists() or vmlinux_h.stat().st_size == 0:
        res = _run(["bpftool", "btf", "dump", "file", str(BTF_PATH), "format", "c"], "generating vmlinux.h")
        tmp = vmlinux_h.with_suffix(".h.tmp")
        tmp.write_text(res.stdout)
        tmp.replace(vmlinux_h)
    src = source_dir()
    header = src / "mltcp_cc.bpf.h"
    objs = {}
    for v in variants:
        c_file = src / VARIANTS[v][0]
        obj = out / (c_file.name[:-2] + ".o")
        newest = max(c_file.stat().st_mtime, header.stat().st_mtime, vmlinux_h.stat().st_mtime)
        if force or not obj.exists() or obj.stat().st_mtime < newest:
            tmp = obj.with_suffix(".o.tmp")
            _run(clang_argv(clang, c_file, tmp, "-I", str(out), "-I", str(src)), f"compiling {c_file.name}")
            tmp.replace(obj)
        objs[v] = obj
    return objs


def _struct_ops() -> list[tuple[str, int]]:
    return [(s["name"], s["id"]) for s in _bpftool_json("struct_ops", "list") if s.get("name") in VARIANTS]


def registered() -> dict[str, int]:
    """Our variants that are registered (in the kernel's available list): name -> struct_ops id."""
    avail = set(available())
    out: dict[str, int] = {}
    for name, sid in _struct_ops():
        if name in avail and sid > out.get(name, -1):
            out[name] = sid
    return out


def lingering() -> dict[str, list[int]]:
    """Unregistered struct_ops maps of our variants still held by sockets: name -> ids."""
    reg = registered()
    out: dict[str, list[int]] = {}
    for name, sid in _struct_ops():
        if reg.get(name) != sid:
            out.setdefault(name, []).append(sid)
    return out


def available() -> list[str]:
    return AVAILABLE.read_text().split()


def _unregister(name: str) -> None:
    sid = registered().get(name)
    if sid is not None:
        _run(["bpftool", "struct_ops", "unregister", "id", str(sid)], f"unregistering {name}")


def load(
    variants=tuple(VARIANTS), config: Config | dict[str, Config] = Config(), clang: str = "clang"
) -> dict[str, int]:
    """Build if needed, register the variants and write ``config`` (one for all, or one per
    variant). Replaces loaded copies.

    If any step fails, whatever this call registered is unregistered again before raising."""
    variants = check_variants(variants)
    configs = config if isinstance(config, dict) else {v: config for v in variants}
    for v in variants:
        if v not in configs:
            raise KernelCCError(f"no configuration given for {v}")
        try:
            configs[v].validate()
        except ValueError as e:
            raise KernelCCError(f"bad configuration: {e}") from None
    require_root("loading BPF congestion control")
    require_btf()
    require_tools("bpftool")
    require_struct_ops()
    objs = build(variants, clang=clang)
    close_cached()  # mark_iteration_start's open maps would belong to the old copies
    done: list[str] = []
    try:
        for v in variants:
            if v in registered():
                _unregister(v)
            _run(["bpftool", "struct_ops", "register", str(objs[v])], f"registering {v}")
            done.append(v)
            try:
                with VariantMaps(v) as vm:
                    vm.write_config(configs[v])
            except (MapsError, OSError) as e:
                raise KernelCCError(f"writing the configuration of {v}: {e}") from None
            if v not in available():
                raise KernelCCError(f"{v} registered but not listed in {AVAILABLE}")
    except BaseException:
        for v in done:
            try:
                _unregister(v)
            except KernelCCError:
                pass
        raise
    return {v: i for v, i in registered().items() if v in variants}


def unload(variants=tuple(VARIANTS), wait: float = 3.0) -> tuple[list[str], list[str]]:
    """Unregister the variants that are registered. Returns (removed, lingering).

    The name leaves tcp_available_congestion_control at once (checked; an error otherwise). The
    struct_ops map, its programs and maps are freed when the last socket using it is gone:
    ``lingering`` names the variants whose struct_ops map or maps are still there after ``wait``
    seconds, because open (or orphaned, still retransmitting) sockets or open map fds hold them, or
    a reference the kernel never returned: setting a variant that is not in
    tcp_allowed_congestion_control as a network namespace's default fails with EPERM and keeps one
    (seen on 6.18), so never try that."""
    variants = check_variants(variants)
    require_root("unloading BPF congestion control")
    require_tools("bpftool")
    close_cached()  # open map fds (mark_iteration_start's) would keep the maps alive
    removed = []
    for v in variants:
        if v in registered():
            _unregister(v)
            removed.append(v)
    still = [v for v in variants if v in available()]
    if still:
        raise KernelCCError(f"still in {AVAILABLE} after unregistering: {', '.join(still)}")
    # The kernel frees the struct_ops map, then its programs and maps, after RCU grace periods.
    deadline = time.monotonic() + wait
    while True:
        held = [v for v in variants if v in lingering() or find_maps(v)]
        if not held or time.monotonic() >= deadline:
            return removed, held
        time.sleep(0.1)


def status() -> dict:
    """Registered variants, their configuration and the kernel's available list."""
    out: dict = {"available": available(), "registered": {}, "lingering": {}, "cache_dir": str(cache_dir())}
    try:
        regs = registered()
        out["lingering"] = lingering()
    except MapsError as e:
        out["error"] = str(e)
        return out
    for v, sid in regs.items():
        entry: dict = {"struct_ops_id": sid}
        try:
            with VariantMaps(v) as vm:
                valid, slope, icpt, idle, min_idle, flags, trace, restart, trial, cont, hold_max, floor, above = (
                    vm.read_config()
                )
                entry["maps"] = vm.ids
                entry["stats"] = vm.stats()
                if valid:
                    entry["config"] = {
                        "slope": round(slope / 1024, 4),
                        "intercept": round(icpt / 1024, 4),
                        "idle_fraction": round(idle / 1024, 4),
                        "min_idle": min_idle / 1e6,
                        "scale_decrease": bool(flags & FLAG_SCALE_DECREASE),
                        "nic_cap": bool(flags & FLAG_NIC_CAP),
                        "trace_port": trace,
                        "restart_window": restart,
                        "adaptive": bool(flags & FLAG_ADAPTIVE),
                        "trial": trial,
                        "contended_above": round(cont / 1024, 4),
                        "hold_max": hold_max,
                        "min_window": floor,
                        "above_bdp_gain": round(above / 1024, 4) if above else ABOVE_BDP_DEFAULT[v],
                    }
                else:
                    entry["config"] = "built-in defaults"
        except (MapsError, OSError) as e:
            entry["error"] = str(e)
        out["registered"][v] = entry
    return out
