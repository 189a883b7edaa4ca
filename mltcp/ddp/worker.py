"""One rank of an emulated data-parallel training job: real DDP over gloo (kernel TCP), emulated GPU time.

    python -m mltcp.ddp.worker --job A --rank 0 --world 2 --master 10.0.0.1:29500 --model resnet50 ...

What it does: ``torch.distributed`` with the gloo backend (one TCP connection per rank pair, in
whatever network namespace it runs), a real :class:`~torch.nn.parallel.DistributedDataParallel`
model with its real bucketing (``--bucket-mb``), real forward/backward/SGD on small synthetic
batches drawn from a fixed seed, ``torch.set_num_threads(1)``, and each layer's GPU time played
as waits in the autograd graph (:mod:`mltcp.ddp.profile`). The communication hook
(:mod:`mltcp.ddp.hook`, through :func:`mltcp.torch.attach`) records each iteration and, with
``--mark``, marks its first bucket in the kernel MLTCP's map.

stdout: JSON lines. ``ready`` once the process group and the model are up (with ``--wait`` it
then reads the run's start epoch from stdin); per iteration an ``iter`` line (the fields of
:class:`mltcp.records.IterationRecord`, times in seconds since the epoch, plus ``loss``,
``last_collective``, ``cpu_s``, ``gpu_s``); finally a ``summary`` (retransmissions of its gloo
connections, their congestion control), then a barrier and the process exits at once
(:func:`mltcp.torch.exit_now`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import typer

app = typer.Typer(add_completion=False, help="One rank of an emulated DDP training job.")


def emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def retransmits(conns) -> int:
    import socket

    from mltcp.traffic.kernel.transport import tcp_info

    total = 0
    for c in conns:
        s = socket.socket(fileno=c.fd)
        try:
            total += tcp_info(s)["total_retrans"]
        except OSError:
            pass
        finally:
            s.detach()
    return total


def kernel_sockets(conns, cc: str | None) -> list[dict | None] | None:
    """The kernel MLTCP tracker's state of each connection (None where it has none), or None when
    the connections do not run an MLTCP variant: the iterations it closed, whether the online
    switch has the hook on, the bytes per iteration it learned, the best iteration rate it saw
    (Mbit/s over busy time; times the smallest RTT, the path BDP that the window floor and
    above_bdp_gain use) and the last iteration's stretch (its busy time over its bytes at that rate)."""
    import socket

    from mltcp.traffic.kernel import maps

    variant = (cc or "").removeprefix("bpf_")
    if variant not in maps.VARIANTS:
        return None
    vm = maps._cached(variant)
    out = []
    for c in conns:
        s = socket.socket(fileno=c.fd)
        try:
            st = vm.socket_state(s)
        finally:
            s.detach()
        out.append(
            None
            if st is None
            else {
                "completed": st.completed,
                "engaged": bool(st.engaged),
                "learned_bytes": st.learned,
                "best_rate_mbit": round(st.best_rate_mbit, 1),
                "last_stretch": round(st.last_stretch, 2),
            }
        )
    return out


def build(model: str, seed: int, gpu_ms: float | None):
    """(spec, model, layer times) for ``model``; ``gpu_ms`` overrides the published GPU time."""
    import torch

    from . import models, profile

    spec = models.spec(model)
    torch.manual_seed(seed)
    net = spec.build()
    times = profile.profile_for(net, spec, (spec.published_ms if gpu_ms is None else gpu_ms) / 1e3)
    return spec, net, times


@app.command()
def main(
    job: str = typer.Option(..., help="job name (records' job field)"),
    rank: int = typer.Option(..., min=0),
    world: int = typer.Option(..., min=1),
    master: str = typer.Option(..., help="ADDR:PORT of rank 0's rendezvous store"),
    model: str = typer.Option("tiny"),
    iterations: int = typer.Option(10, min=1),
    gpu_ms: float = typer.Option(-1.0, help="emulated GPU time per iteration, ms (< 0: the model's)"),
    seed: int = typer.Option(1),
    bucket_mb: float = typer.Option(25.0, min=0.01),
    lr: float = typer.Option(0.01),
    cc: str = typer.Option("", help="congestion control for gloo's sockets ('' = the namespace default)"),
    mark: bool = typer.Option(False, help="mark each iteration's first bucket in the kernel MLTCP map"),
    pacing_mbit: float = typer.Option(0.0, help="pace gloo's sockets at this rate (0: unpaced)"),
    nic_cap: bool = typer.Option(False, help="MLTCP variants: no growth past 2 F(r) x pacing rate x min RTT"),
    ifname: str = typer.Option("", help="interface gloo binds to (GLOO_SOCKET_IFNAME)"),
    wait: bool = typer.Option(False, help="after ready, read the start epoch from stdin"),
    start_offset: float = typer.Option(0.0, help="start this many seconds after the epoch"),
    timeout_s: float = typer.Option(300.0),
    run: str = typer.Option("", "--run", help="run tag (only marks the process as part of a run)"),
):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import mltcp.torch as mt

    from . import netstat, profile

    torch.set_num_threads(1)
    addr, port = master.rsplit(":", 1)
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=port)
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    spec, net, times = build(model, seed, None if gpu_ms < 0 else gpu_ms)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    cc = cc or mt.sockets.default_cc()
    try:  # gloo connected every pair in init_process_group: on cc before DDP's first broadcast
        from mltcp.traffic.kernel.maps import Config

        config = Config(nic_cap=True) if nic_cap else None
        if mark and cc.removeprefix("bpf_") in mt.MLTCP_VARIANTS:
            config = mt.marks_only(config)  # marks alone end iterations
        mt.set_connections_cc(cc, {int(port)}, pacing_mbit or None, config)
        ddp = DistributedDataParallel(net, bucket_cap_mb=bucket_mb)
        hook = mt.attach(ddp, cc=cc, mark=mark, store_port=int(port), config=config)
    except mt.AttachError as e:
        raise SystemExit(f"worker {job}/{rank}: {e}") from None
    clock = profile.GpuClock()
    profile.instrument(net, times, clock)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    n_params = sum(p.numel() for p in net.parameters())
    conns = mt.sockets.own_connections({int(port)})
    emit({"type": "ready", "job": job, "rank": rank, "params": n_params, "cc": hook.cc, "ports": hook.ports})
    t0 = float(sys.stdin.readline()) if wait else time.time()
    # counted from here: not DDP's setup
    emit({"type": "start", "job": job, "rank": rank, "retrans": retransmits(conns), "tcp": netstat.read()})
    hook.clock = lambda: time.time() - t0
    delay = t0 + start_offset - time.time()
    if delay > 0:
        time.sleep(delay)
    for _ in range(iterations):
        x, y = spec.batch(gen)
        cpu0, booked0 = time.process_time(), clock.booked_s
        it = hook.begin()
        clock.reset()
        loss = spec.loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        it = hook.end()
        emit(
            {
                "type": "iter",
                "job": job,
                "rank": rank,
                "iteration": it.iteration,
                "start": it.start,
                "comm_start": it.first_collective if it.first_collective is not None else it.start,
                "end": it.step_done,
                "bytes": it.bytes,
                "last_collective": it.last_collective_done,
                "buckets": it.buckets,
                "loss": float(loss.item()),
                "cpu_s": time.process_time() - cpu0,
                "gpu_s": clock.booked_s - booked0,
                "retrans": retransmits(conns),
            }
        )
    emit(
        {
            "type": "summary",
            "job": job,
            "rank": rank,
            "retrans": retransmits(conns),
            "tcp": netstat.read(),  # this rank's namespace: why its connections retransmitted
            "cc": hook.cc,
            "mark_errors": hook.mark_errors,
            "kernel_sockets": kernel_sockets(conns, hook.cc),
        }
    )
    dist.barrier()  # every rank is done with the job's connections
    mt.exit_now()


if __name__ == "__main__":
    app()
