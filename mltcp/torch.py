"""MLTCP under a PyTorch DistributedDataParallel script (gloo over kernel TCP).

    import mltcp.torch
    ddp = DistributedDataParallel(model)
    hook = mltcp.torch.attach(ddp, cc="mltcp_reno")
    for batch in data:
        hook.begin(); loss = ...; loss.backward(); opt.step(); times = hook.end()

:func:`attach` puts gloo's connections of this process on the congestion control ``cc`` (set
per socket; the kernel MLTCP variants must be registered: ``sudo mltcp kernel load``) and
registers a communication hook that marks each iteration's first gradient bucket in the kernel
MLTCP's mark map, so the kernel starts a new iteration exactly when the framework does. ``begin``
and ``end`` around an iteration are optional: without them nothing is recorded or marked, and the
hook all-reduces as DDP's default does.
"""

from __future__ import annotations

import os

from mltcp.ddp import hook as _hook
from mltcp.ddp import sockets

MLTCP_VARIANTS = ("mltcp_reno", "mltcp_cubic")
# With marks, the kernel's idle-gap rule is switched off for these connections (its minimum gap
# set this long, seconds): DDP's gaps between buckets would otherwise split an iteration.
MARK_ONLY_MIN_IDLE_S = 3600.0


def marks_only(config=None):
    """``config`` (default: the kernel's defaults) with the idle-gap rule off: marks alone end iterations."""
    import dataclasses

    from mltcp.traffic.kernel.maps import Config

    return dataclasses.replace(config or Config(), min_idle=MARK_ONLY_MIN_IDLE_S)


def exit_now() -> None:
    """Leave the process at once, after the last barrier, without tearing torch.distributed down.
    torch 1.13 can deadlock there: the DDP reducer's destructor joins gloo's work thread while
    holding the GIL, and that thread waits for the GIL to free a tensor; meanwhile the rendezvous
    store's client thread spins on the closed socket of rank 0, which left first (a bench rank hung
    so for 13 minutes; two local ranks of examples/ddp_two_ranks.py for 3). The kernel closes every
    socket on exit anyway."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class AttachError(RuntimeError):
    """attach() could not do what was asked; the message says what to run."""


def _mark_ports(variant: str, ports: list[int]):
    from mltcp.traffic.kernel import maps

    def mark() -> None:
        for p in ports:
            maps.mark_iteration_start(p, [variant])

    return mark


def set_connections_cc(
    cc: str, exclude_ports: set[int], pacing_mbit: float | None = None, config=None
) -> tuple[str, list[sockets.Conn]]:
    """Put this process's TCP connections (but the store's) on ``cc``, paced at ``pacing_mbit``
    if given, with MLTCP settings ``config`` (a mltcp.traffic.kernel.maps.Config, written for each
    connection's local port before the socket switches, so its init reads it); returns the
    kernel's name for ``cc`` and the connections."""
    avail = sockets.available_ccs()
    name = sockets.kernel_name(cc, avail)
    if name is None:
        how = ("sudo mltcp kernel load -v " + cc) if cc in MLTCP_VARIANTS else f"sudo modprobe tcp_{cc}"
        raise AttachError(
            f"congestion control {cc!r} is not registered in this network namespace "
            f"(available: {' '.join(avail)}); run: {how}"
        )
    conns = sockets.own_connections(exclude_ports)
    if not conns:
        raise AttachError(
            "no established TCP connections in this process: call attach() after "
            "init_process_group(backend='gloo') and building DistributedDataParallel"
        )
    if config is not None and name.removeprefix("bpf_") in MLTCP_VARIANTS:
        from mltcp.traffic.kernel.maps import _cached

        vm = _cached(name.removeprefix("bpf_"))
        for c in conns:
            vm.write_config(config, port=c.local_port)
    for c in conns:
        if pacing_mbit:
            sockets.set_pacing(c.fd, pacing_mbit)
        if sockets.get_cc(c.fd) == name and config is None:
            continue
        if config is not None and sockets.get_cc(c.fd) == name:  # re-init with the new settings
            sockets.set_cc(c.fd, "reno" if name != "reno" else "cubic")
        try:
            sockets.set_cc(c.fd, name)
        except PermissionError:
            raise AttachError(
                f"setting {name} on gloo's sockets needs CAP_NET_ADMIN or {name} in "
                "net.ipv4.tcp_allowed_congestion_control; run as root, or: sudo sysctl -w "
                f"net.ipv4.tcp_congestion_control={name} before starting the job"
            ) from None
    return name, conns


def attach(
    ddp_model,
    cc: str | None = "mltcp_reno",
    mark: bool = True,
    store_port: int | None = None,
    process_group=None,
    pacing_mbit: float | None = None,
    config=None,
) -> _hook.IterationHook:
    """Register MLTCP's iteration hook on ``ddp_model`` and put its gloo connections on ``cc``.

    ``cc``: a kernel congestion control name (reno, cubic, mltcp_reno, mltcp_cubic, ...); None
    leaves the sockets as they are. ``mark``: with an MLTCP variant, the first bucket of each
    iteration marks the iteration's start in the kernel (else the kernel's idle-gap rule decides).
    With marks, the kernel's idle-gap rule is off for these connections (:func:`marks_only`).
    ``store_port``: the rendezvous store's port (default $MASTER_PORT), whose connection is left
    alone. ``pacing_mbit``: pace each connection at this rate (SO_MAX_PACING_RATE), e.g. the NIC's
    (payload) rate. ``config``: MLTCP settings for these connections only
    (:class:`mltcp.traffic.kernel.maps.Config`, e.g. ``Config(nic_cap=True)`` with pacing).
    Returns the hook state: call ``begin()`` before each forward and ``end()`` after the
    optimizer step to record and mark iterations."""
    if store_port is None and os.environ.get("MASTER_PORT", "").isdigit():
        store_port = int(os.environ["MASTER_PORT"])
    exclude = {store_port} if store_port else set()
    marker = None
    state = _hook.IterationHook(group=process_group)
    state.cc, state.ports = None, []
    if cc is not None:
        if mark and sockets.kernel_name(cc, sockets.available_ccs()) and cc.removeprefix("bpf_") in MLTCP_VARIANTS:
            config = marks_only(config)
        name, conns = set_connections_cc(cc, exclude, pacing_mbit, config)
        state.cc, state.ports = name, sorted({c.local_port for c in conns})
        if mark and name.removeprefix("bpf_") in MLTCP_VARIANTS:
            marker = _mark_ports(name.removeprefix("bpf_"), state.ports)
    state.mark = marker
    return _hook.register(ddp_model, state)
