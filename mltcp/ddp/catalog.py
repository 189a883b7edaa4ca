"""The DDP models' sizes and emulated GPU times, and a scenario's ``workload = "torch-ddp"`` job
fields, without importing torch (scenarios load, and the simulator runs them, without it).

A torch-ddp job in a scenario::

    [[jobs]]
    name = "A"
    workload = "torch-ddp"
    model = "resnet50"        # a name of MODELS
    ranks = 2                 # processes, one per emulated host
    hosts = ["a1", "b1"]      # optional: the hosts of the ranks (dumbbell a<k>, b<k>; leaf-spine h1<k>, h2<k>)
    gpu_ms = 400              # optional: emulated GPU time per iteration (default: the model's)
    bucket_mb = 25            # DDP's bucket_cap_mb
    boundary = "mark"         # MLTCP arm: the hook marks each first bucket (idle rule off), or "idle"
    pacing = true             # pace gloo's sockets at the link's rate (hosts with a NIC of that rate), both arms
    nic_cap = false           # MLTCP arm, with pacing: no window growth past 2 F(r) x pacing rate x min RTT
    sim_compute_ms = 1317     # optional: the simulator's compute per iteration (mltcp emulate calibrate)
    path = ["bottleneck"]
    start_offset_ms = 0

For the simulator the job is what the network sees: ``gpu_ms`` of compute (or ``sim_compute_ms``),
then the ring all-reduce of the gradients (2 (n-1)/n x 4 bytes per parameter per rank).
``sim_compute_ms`` is measured (mltcp.ddp.calibrate): the job alone's iteration in the emulation
less its all-reduce at the link's rate. It carries what ``gpu_ms`` alone misses: DDP all-reduces
most buckets under backward, and the ranks' CPU work (the step, gloo, the kernel's TCP) adds to it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Published per-iteration GPU times (docs/ddp.md, "GPU time"): ResNet-50 v1.5 trains at 367 img/s
# on one V100 16 GB in FP32 (NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README): 64
# images per GPU take 174 ms. VGG-16 and the transformer are scaled from it by their multiply-adds
# per sample at the same achieved rate (15.5 vs 4.1 G per image; 124 M x 1024 per 1024-token sequence).
RESNET50_MS_PER_IMAGE = 1e3 / 367


@dataclass(frozen=True)
class ModelSize:
    params: int  # parameters = fp32 gradients all-reduced per iteration
    published_ms: float  # emulated GPU time per iteration by default
    gpu_batch: int  # the per-GPU batch that time is for


MODELS: dict[str, ModelSize] = {
    "resnet50": ModelSize(25_557_032, 64 * RESNET50_MS_PER_IMAGE, 64),
    "vgg16": ModelSize(138_357_544, 16 * RESNET50_MS_PER_IMAGE * 15.5 / 4.1, 16),
    "gpt2-small": ModelSize(124_439_808, 4 * RESNET50_MS_PER_IMAGE * 124e6 * 1024 / 4.1e9, 4),
    "mlp8m": ModelSize(2_106_378, 400.0, 1),  # 8.4 MB of gradients, the hand-made two-job case
    "tiny": ModelSize(199_946, 50.0, 1),  # tests
}
MAX_RANKS = 16
BOUNDARIES = ("idle", "mark")


@dataclass(frozen=True)
class DdpJob:
    """The DDP part of a torch-ddp job (kept in ``Job.extra["ddp"]``)."""

    model: str
    ranks: int
    hosts: tuple[str, ...] | None
    gpu_ms: float
    bucket_mb: float
    boundary: str = "mark"
    pacing: bool = True
    nic_cap: bool = False  # off: at 1 Gb/s it pinned sockets at 2 segments (docs/ddp.md, ResNet-50)
    sim_compute_ms: float | None = None  # the simulator's compute per iteration (default gpu_ms)

    def gradient_bytes(self) -> int:
        return 4 * MODELS[self.model].params

    def sim_compute_s(self) -> float:
        """The compute the simulator gives the job per iteration, seconds."""
        return (self.gpu_ms if self.sim_compute_ms is None else self.sim_compute_ms) * 1e-3


def read_ddp_fields(r) -> DdpJob:
    """The torch-ddp fields of a job table (``r``: mltcp.scenario's field reader)."""
    model = r.get("model", str, ..., lambda v: v in MODELS, f"must be one of {', '.join(MODELS)}")
    ranks = r.get("ranks", int, 2, lambda v: 2 <= v <= MAX_RANKS, f"must be in [2, {MAX_RANKS}]")
    hosts = r.get(
        "hosts",
        list,
        None,
        lambda v: len(v) == ranks and all(isinstance(h, str) and h for h in v),
        "must list one host name per rank",
    )
    gpu = r.get("gpu_ms", float, MODELS[model].published_ms, lambda v: 0 <= v <= 600_000, "must be in [0, 600000]")
    bucket = r.get("bucket_mb", float, 25.0, lambda v: 0.01 <= v <= 4096, "must be in [0.01, 4096]")
    boundary = r.get("boundary", str, "mark", lambda v: v in BOUNDARIES, f"must be one of {', '.join(BOUNDARIES)}")
    pacing = r.get("pacing", bool, True)
    nic_cap = r.get("nic_cap", bool, False)
    sim_compute = r.get("sim_compute_ms", float, None, lambda v: 0 <= v <= 600_000, "must be in [0, 600000]")
    return DdpJob(model, ranks, tuple(hosts) if hosts else None, gpu, bucket, boundary, pacing, nic_cap, sim_compute)
