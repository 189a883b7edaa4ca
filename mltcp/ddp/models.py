"""Models for emulated data-parallel training jobs, defined in code at the sizes of real ones.

What goes on the wire in data-parallel training is the gradients, one fp32 per parameter, so
each model keeps its real parameter count (ResNet-50 25.6 M, VGG-16 138 M, GPT-2 small 124 M;
nothing is downloaded) while it trains on small synthetic batches. Each :class:`ModelSpec` also
gives the input at which its FLOPs are counted (the real training shape, on the meta device) and
the small input it actually trains on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from . import catalog

# --------------------------------------------------------------------------- ResNet-50 (v1.5)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


def resnet50(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * Bottleneck.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- VGG-16

VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def vgg16(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for v in VGG16_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
    layers += [
        nn.AdaptiveAvgPool2d(7),
        nn.Flatten(),
        nn.Linear(512 * 49, 4096),
        nn.ReLU(),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, classes),
    ]
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- GPT-2-small-like


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Decoder-only transformer with GPT-2's shapes; the output layer shares the token embedding."""

    def __init__(self, vocab: int = 50257, ctx: int = 1024, d: int = 768, layers: int = 12, heads: int = 12):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.ln(self.blocks(x)) @ self.tok.weight.t()


# --------------------------------------------------------------------------- MLPs (tests, small cases)


def mlp(width: int, layers: int, classes: int = 10) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(width, classes))


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class ModelSpec:
    """A model and its inputs: ``profile_shape`` is one real training sample's input (FLOPs are
    counted there, on the meta device), ``train_shape`` the small batch it trains on here."""

    name: str
    build: Callable[[], nn.Module]
    kind: str  # "image", "tokens" or "vector": how inputs and targets are drawn
    profile_shape: tuple[int, ...]
    train_shape: tuple[int, ...]
    classes: int

    @property
    def published_ms(self) -> float:
        """The per-iteration GPU time emulated by default (mltcp.ddp.catalog, docs/ddp.md)."""
        return catalog.MODELS[self.name].published_ms

    def batch(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One synthetic batch (input, target) drawn from ``gen``."""
        if self.kind == "tokens":
            x = torch.randint(0, self.classes, self.train_shape, generator=gen)
            return x, torch.randint(0, self.classes, self.train_shape, generator=gen)
        x = torch.randn(self.train_shape, generator=gen)
        return x, torch.randint(0, self.classes, self.train_shape[:1], generator=gen)

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec("resnet50", resnet50, "image", (1, 3, 224, 224), (2, 3, 32, 32), 1000),
    "vgg16": ModelSpec("vgg16", vgg16, "image", (1, 3, 224, 224), (2, 3, 32, 32), 1000),
    "gpt2-small": ModelSpec("gpt2-small", GPT, "tokens", (1, 1024), (1, 4), 50257),
    "mlp8m": ModelSpec("mlp8m", lambda: mlp(512, 8), "vector", (1, 512), (4, 512), 10),
    "tiny": ModelSpec("tiny", lambda: mlp(256, 3), "vector", (1, 256), (4, 256), 10),
}


def spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}") from None


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
