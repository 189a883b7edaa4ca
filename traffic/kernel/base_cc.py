"""Base congestion controls this kernel lacks, registered as BPF struct_ops: ``dctcp`` as
``bpf_dctcp`` (dctcp.bpf.c). Plain algorithms: no MLTCP hook, no maps to configure. The
emulation registers one for a run that asks for it and unregisters it afterwards
(:func:`ensure`, :func:`remove`)."""

from __future__ import annotations

from . import loader, tcprog
from .maps import _bpftool_json

PROGRAMS = {"dctcp": ("bpf_dctcp", "dctcp.bpf.c")}


def kernel_name(cc: str) -> str:
    return PROGRAMS[cc][0]


def _ids(name: str) -> list[int]:
    return [s["id"] for s in _bpftool_json("struct_ops", "list") if s.get("name") == name]


def ensure(cc: str) -> bool:
    """Register ``cc``'s program unless the kernel already lists its name; True if this call did."""
    name, source = PROGRAMS[cc]
    if name in loader.available():
        return False
    loader.require_root(f"registering {name}")
    loader.require_struct_ops()
    obj = tcprog.build(source, {})
    loader._run(["bpftool", "struct_ops", "register", str(obj)], f"registering {name}")
    if name not in loader.available():
        raise loader.KernelCCError(f"{name} registered but not listed in {loader.AVAILABLE}")
    return True


def remove(cc: str) -> None:
    """Unregister ``cc``'s program: the newest copy, the one the kernel lists. Older copies that
    sockets still hold are being freed already (unregistering them again fails)."""
    name = kernel_name(cc)
    ids = _ids(name)
    if name in loader.available() and ids:
        loader._run(["bpftool", "struct_ops", "unregister", "id", str(max(ids))], f"unregistering {name}")
    if name in loader.available():
        raise loader.KernelCCError(f"{name} still in {loader.AVAILABLE} after unregistering")
