"""tc BPF programs built per use with their numbers as ``-D`` constants (ecn_mark.bpf.c,
stamp.bpf.c): compile into the BPF cache, attach on a Mininet node's interface (clsact), read an
array map back through bpftool. ``ns`` names the network namespace by a file
(``/proc/<pid>/ns/net`` of a Mininet node, ``/run/netns/NAME``).

``tc`` runs in that network namespace but this process's mount namespace (nsenter --net): a Mininet
host has a private mount namespace without the BPF filesystem, where tc cannot load
an object with maps ("mkdir /sys/fs/bpf/tc/ failed ... Unable to load program")."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from . import loader
from .netns import NetnsError


def build(source: str, defines: dict[str, int | str]) -> Path:
    """``source`` (a file in this package) compiled with ``-DNAME=value`` for each define; cached
    by source and values, rebuilt when the source is newer."""
    src = loader.source_dir() / source
    tag = "".join(f"-{v}" for v in defines.values())
    out = loader.cache_dir() / f"{source.removesuffix('.bpf.c')}{tag}.bpf.o"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    loader.build([])  # vmlinux.h into the cache directory
    tmp = out.with_suffix(".o.tmp")
    p = subprocess.run(
        loader.clang_argv("clang", src, tmp, "-I", str(out.parent), *(f"-D{k}={v}" for k, v in defines.items())),
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise NetnsError(f"clang failed on {src}:\n{p.stderr.strip()}")
    tmp.replace(out)
    return out


def in_ns(ns: str, argv: list[str]) -> str:
    """``argv`` run in network namespace ``ns``; NetnsError naming both if it fails."""
    p = subprocess.run(["nsenter", f"--net={ns}", *argv], capture_output=True, text=True)
    if p.returncode != 0:
        raise NetnsError(f"{ns}: '{' '.join(argv)}' failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()}")
    return p.stdout


def _tc(ns: str, args: list[str]) -> str:
    return in_ns(ns, ["tc", *args])


def _bpftool(args: list[str]) -> object:
    p = subprocess.run(["bpftool", *args, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise NetnsError(f"'bpftool {' '.join(args)}' failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()}")
    return json.loads(p.stdout)


def attach(ns: str, dev: str, obj: Path, direction: str = "egress") -> None:
    """The object's ``tc`` section as a direct-action filter on ``dev`` (clsact added if missing)."""
    if "clsact" not in _tc(ns, ["qdisc", "show", "dev", dev]):
        _tc(ns, ["qdisc", "add", "dev", dev, "clsact"])
    _tc(ns, ["filter", "add", "dev", dev, direction, "bpf", "direct-action", "obj", str(obj), "sec", "tc"])


def array_map(ns: str, dev: str, map_name: str, direction: str = "egress", key: int = 0) -> bytes:
    """The value at ``key`` of the attached program's array map ``map_name``."""
    out = _tc(ns, ["filter", "show", "dev", dev, direction])
    m = re.search(r" id (\d+) ", out)
    if not m:
        raise NetnsError(f"no BPF program on {dev} {direction}: {out!r}")
    for mid in _bpftool(["prog", "show", "id", m.group(1)]).get("map_ids", []):
        if _bpftool(["map", "show", "id", str(mid)]).get("name") == map_name[:15]:
            raw = _bpftool(["map", "lookup", "id", str(mid), "key", *(str(b) for b in key.to_bytes(4, "little"))])
            return bytes(int(b, 16) for b in raw["value"])
    raise NetnsError(f"map {map_name} not found on the program of {dev} {direction}")
