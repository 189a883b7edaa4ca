"""The PNG plots: both figures are written as real PNG images, also for an empty run."""

import numpy as np

from mltcp import plots
from mltcp.records import IterationRecord

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # IHDR width, height


def test_throughput_panels_and_window(tmp_path):
    t = np.linspace(0, 1, 101)
    rate = np.stack([np.where(t < 0.5, 1e9, 0.0), np.where(t < 0.5, 0.0, 1e9)], axis=1)
    one = plots.throughput([("reno", t, rate, ["A", "B"])], tmp_path / "one.png")
    two = plots.throughput(
        [("reno", t, rate, ["A", "B"]), ("mltcp-reno", t, rate, ["A", "B"])],
        tmp_path / "two.png",
        window=(0.2, 0.8),
        title="t",
    )
    (w1, h1), (w2, h2) = _png_size(one), _png_size(two)
    assert w1 == w2 and h2 > h1  # one panel per run, stacked


def test_iteration_cdf_with_ideal_and_an_empty_run(tmp_path):
    recs = [IterationRecord("A", i, 0.1 * i, 0.1 * i + 0.05, 0.1 * i + 0.09 + 0.001 * i, 1e6) for i in range(20)]
    out = plots.iteration_cdf([("reno", recs), ("empty", [])], tmp_path / "cdf.png", ideal=0.09, title="x")
    assert out == tmp_path / "cdf.png" and _png_size(out)[0] > 0
