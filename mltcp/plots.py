"""PNG plots: per-job throughput over time (interleaving shows as alternating bands) and the
iteration-time CDF. Uses matplotlib's Agg backend; no display needed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .records import IterationRecord, atomic_path  # noqa: E402


def throughput(
    runs: list[tuple[str, np.ndarray, np.ndarray, list[str]]],
    path: Path,
    window: tuple[float, float] | None = None,
    title: str = "",
) -> Path:
    """runs: (label, t seconds, rate bits/s [bins x jobs], job names); one panel per run."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), sharex=True, squeeze=False)
    for ax, (label, t, rate, names) in zip(axes[:, 0], runs):
        sel = slice(None)
        if window is not None and len(t):
            sel = (t >= window[0]) & (t <= window[1])
        shown = names if len(names) <= 8 else names[:8]
        for j, n in enumerate(shown):
            ax.fill_between(t[sel], rate[sel, j] / 1e9, step="mid", alpha=0.45, lw=0, label=n)
            ax.plot(t[sel], rate[sel, j] / 1e9, lw=0.6, drawstyle="steps-mid")
        ax.set_ylabel("Gb/s")
        ax.set_title(label, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes[-1, 0].set_xlabel("time (s)")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def iteration_cdf(
    runs: list[tuple[str, list[IterationRecord]]], path: Path, ideal: float | None = None, title: str = ""
) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, recs in runs:
        d = np.sort([r.duration * 1e3 for r in recs])
        if len(d):
            ax.step(d, np.arange(1, len(d) + 1) / len(d), where="post", label=label)
    if ideal:
        ax.axvline(ideal * 1e3, color="grey", ls="--", lw=1, label="ideal (alone)")
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("CDF")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return _save(fig, path)


def _save(fig, path) -> Path:
    """Write the PNG atomically (temporary file, then rename): never a half-written plot."""
    try:
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return Path(path)
