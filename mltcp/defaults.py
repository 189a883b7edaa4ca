"""MLTCP's shipped default: what ``mltcp-reno``, ``mltcp-cubic``, ``mltcp-dctcp`` and ``mltcp-dcqcn``
mean with no ``[mltcp]`` table, in every engine (the simulator and the userspace senders through
:class:`mltcp.cc.mltcp.MLTCPHook`, ns-3 through the same Params, the kernel through
:class:`mltcp.traffic.kernel.maps.Config` and the ``MLTCP_DEF_*`` of ``mltcp_cc.bpf.h``, which a
test holds to these numbers).

* F is the public MLTCP-Reno's, 4 r + 0.25, divided by its mean over an iteration (2.25), so a flow
  is on average no more aggressive than its base: F = 1.78 r + 0.11.
* The online switch (:mod:`mltcp.engage`) is on: F acts only while it makes the flow's iterations
  interleave; elsewhere the flow is its base algorithm.
* Below a window of 4 segments, or of the path's BDP where that is less, F never slows the
  increase (window-based variants): a flow that yields down there loses packets with too few in
  flight for three duplicate ACKs, and each such loss waits for a timer (200 ms on Linux), the long
  iterations in the p99; a floor above the BDP would keep it from yielding at all.
* Reno only: once the online switch has made a flow its base, its window grows at half Reno's rate
  while above the path's BDP, where a larger window only queues, so the next overflow comes later
  (on random Reno suites the drops are the base's or fewer in about 90 % of scenarios instead of
  60 %, at the same iteration times). CUBIC and DCTCP keep 1: CUBIC's tail and DCTCP's p99 got
  worse with it.

Chosen on the 30-scenario random suites of suite seeds 11-32 and measured on others
(docs/references.md, "The default").
"""

SLOPE = 1.78
INTERCEPT = 0.11
ADAPTIVE = True
TRIAL = 4
CONTENDED_ABOVE = 1.25
HOLD_MAX = 32
MIN_WINDOW = 4  # segments
# once disengaged, a window above the path BDP grows x this (1 = as the base), per base algorithm
ABOVE_BDP_GAIN = {"reno": 0.5, "cubic": 1.0, "dctcp": 1.0}


def above_bdp_gain(base: str) -> float:
    """The shipped ``above_bdp_gain`` of MLTCP on ``base`` (1, as the base, where none is set)."""
    return ABOVE_BDP_GAIN.get(base, 1.0)
