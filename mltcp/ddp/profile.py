"""Emulated GPU time: a per-layer forward/backward profile, played as sleeps in the autograd graph.

Each layer's share of the model's multiply-adds (counted once at the model's real training input,
on the meta device) times a per-iteration GPU time gives its forward time (1/3) and backward time
(2/3: gradients with respect to inputs and weights). :func:`instrument` hangs an identity
autograd function on every layer's output whose forward and backward wait for that layer's time,
so gradients become ready, and DDP's buckets are all-reduced, at the moments they would be on
the GPU, while the collectives run in gloo's threads.

The waits run against one clock per process (:class:`GpuClock`): a layer's time starts when the
previous layer's ends or now, whichever is later, so the CPU's own work for a layer overlaps its
emulated GPU time as kernel launches overlap kernels; only where the CPU is slower than the
emulated GPU does it show.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch
from torch import nn

FORWARD_SHARE = 1 / 3  # forward : backward = 1 : 2 of a layer's training time
MIN_SLEEP_S = 2e-4  # shorter waits are carried over to the next layer


def _macs(mod: nn.Module, inp, out) -> float:
    """Multiply-adds of one call of ``mod`` (its own work, not its children's)."""
    extra = getattr(mod, "extra_macs", None)
    own = extra(inp, out) if extra else 0.0
    if not isinstance(out, torch.Tensor):
        return own
    if isinstance(mod, nn.Conv2d):
        k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        return own + out.numel() * k
    if isinstance(mod, nn.Linear):
        return own + out.numel() * mod.in_features
    if isinstance(mod, nn.Embedding):
        return own + out.numel()
    if not list(mod.children()):  # norms, activations, pooling: per element
        return own + 2.0 * out.numel()
    return own


def _attention_macs(inp, out) -> float:
    b, t, d = out.shape
    return 2.0 * b * t * t * d  # q @ k^T and att @ v


def _lm_head_macs(mod):
    return lambda inp, out: float(out.numel() * mod.tok.weight.shape[1])


def count_macs(model: nn.Module, sample: torch.Tensor) -> dict[str, float]:
    """Module name -> multiply-adds of one forward of ``sample``, counted on the meta device
    (nothing is computed; the model is not changed)."""
    from .models import GPT, CausalSelfAttention

    meta = _meta_copy(model)
    for mod in meta.modules():
        if isinstance(mod, CausalSelfAttention):
            mod.extra_macs = _attention_macs
        if isinstance(mod, GPT):
            mod.extra_macs = _lm_head_macs(mod)
    names = {mod: name for name, mod in meta.named_modules()}
    macs: dict[str, float] = {}

    def hook(mod, inp, out):
        m = _macs(mod, inp, out)
        if m > 0:
            macs[names[mod]] = macs.get(names[mod], 0.0) + m

    handles = [mod.register_forward_hook(hook) for mod in meta.modules()]
    try:
        with torch.no_grad():
            meta(sample.to("meta"))
    finally:
        for h in handles:
            h.remove()
    return macs


def _meta_copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model).to("meta")


@dataclass(frozen=True)
class LayerTime:
    name: str
    forward_s: float
    backward_s: float


def layer_times(macs: dict[str, float], iteration_s: float) -> list[LayerTime]:
    """Each layer's forward and backward time: its share of ``macs`` times ``iteration_s``."""
    total = sum(macs.values())
    if total <= 0 or iteration_s < 0:
        raise ValueError("layer_times needs some multiply-adds and a non-negative iteration time")
    return [
        LayerTime(n, iteration_s * m / total * FORWARD_SHARE, iteration_s * m / total * (1 - FORWARD_SHARE))
        for n, m in macs.items()
    ]


class GpuClock:
    """When the emulated GPU is next free; :meth:`run` books ``dt`` on it and waits until done."""

    def __init__(self):
        self.free_at = 0.0
        self.booked_s = 0.0
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.free_at = time.perf_counter()

    def run(self, dt: float) -> None:
        with self.lock:
            now = time.perf_counter()
            self.free_at = max(now, self.free_at) + dt
            self.booked_s += dt
            wait = self.free_at - now
        if wait >= MIN_SLEEP_S:
            time.sleep(wait)


class _GpuTime(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, clock, fwd_s, bwd_s):
        ctx.clock, ctx.bwd_s = clock, bwd_s
        clock.run(fwd_s)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.run(ctx.bwd_s)
        return grad, None, None, None


def instrument(model: nn.Module, times: list[LayerTime], clock: GpuClock) -> list:
    """Hang the emulated GPU time of each layer on its output; returns the hook handles."""
    mods = dict(model.named_modules())
    handles = []
    for lt in times:

        def hook(mod, inp, out, lt=lt):
            if isinstance(out, torch.Tensor) and out.requires_grad:
                return _GpuTime.apply(out, clock, lt.forward_s, lt.backward_s)
            clock.run(lt.forward_s)  # no graph behind it (e.g. the first layer's input side)
            return out

        handles.append(mods[lt.name].register_forward_hook(hook))
    return handles


def profile_for(model: nn.Module, spec, iteration_s: float) -> list[LayerTime]:
    """The layer times of ``model`` (built from ``spec``) for ``iteration_s`` per iteration."""
    sample = (
        torch.zeros(spec.profile_shape, dtype=torch.long) if spec.kind == "tokens" else torch.zeros(spec.profile_shape)
    )
    return layer_times(count_macs(model, sample), iteration_s)
