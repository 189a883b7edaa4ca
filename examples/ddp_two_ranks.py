"""Two local DDP ranks over loopback with MLTCP attached: what a user's own training script adds.

    python examples/ddp_two_ranks.py                    # the sockets' congestion control as it is
    sudo mltcp kernel load -v mltcp_reno && sudo python examples/ddp_two_ranks.py --cc mltcp_reno

Each rank prints one JSON line per step: the loss, and the iteration's times as the hook saw them
(start, first collective, last collective done, optimizer step; seconds since the rank started).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import mltcp.torch


def say(doc: dict) -> None:
    os.write(1, (json.dumps(doc) + "\n").encode())  # one write: the two ranks' lines do not mix


def train(rank: int, world: int, args) -> None:
    torch.set_num_threads(1)
    # a rank that never comes: an error after a minute, not torch's default half hour
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    hook = mltcp.torch.attach(ddp, cc=args.cc)  # <- the MLTCP line: cc per socket, marking hook
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x, y = torch.randn(8, 512, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        hook.begin()  # <- iteration starts
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = hook.end()  # <- iteration ends: its times
        say(
            {
                "rank": rank,
                "step": t.iteration,
                "loss": round(loss.item(), 6),
                "cc": hook.cc,
                "start": t.start,
                "first_collective": t.first_collective,
                "last_collective_done": t.last_collective_done,
                "step_done": t.step_done,
                "buckets": t.buckets,
            }
        )
    dist.barrier()
    mltcp.torch.exit_now()  # not destroy_process_group(): torch 1.13 can deadlock in that teardown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cc", default=None, help="congestion control for gloo's sockets (default: leave it)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--port", type=int, default=29531)
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    mp.spawn(train, args=(2, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
