"""The C++ half of the ns-3 engine, compiled at run time by cppyy.

The C++ lives in ``mltcp/sim/ns3/*.h`` (package data); :func:`load` has cppyy include
``mltcp_ns3.h``, which includes the rest.

It holds what must run inside ns-3's event loop, per packet or per ACK:

* ``Tracker`` (tracker.h): :class:`mltcp.tracker.IterationTracker` for one flow (idle gap longer than
  ``max(min_idle, idle_fraction x the previous gap)`` - or the shorter of the last two with
  ``idle_gap = "min2"`` - starts an iteration, or an explicit mark when ``boundary = "mark"``;
  bytes per iteration are the median of the last ``history`` completed iterations; bytes_ratio =
  acked this iteration / that, in [0, 1]).
* ``Mltcp<Base>`` (mltcp_cc.h, over ``Host<Base>`` in host.h): MLTCP as a ``TcpCongestionOps``
  subclass of a stock ns-3 algorithm (``TcpNewReno`` or ``TcpCubic``). Slow start is the base's;
  in congestion avoidance the base's window increase is multiplied by F(bytes_ratio) (linear, capped or convex, as
  :func:`mltcp.cc.mltcp.gain`; the fractional part is carried to the next ACK); optionally the
  decrease is scaled as :func:`mltcp.cc.mltcp.dscale` does (decrease_at_start .. decrease_at_end).
  Bytes acked come from the cumulative ACK (``m_lastAckedSeq``), not from segment counts.
* ``Flow`` (app.h): an application on a sender host with one TCP socket; it sends its share of each
  iteration's bytes when its job says so and reports when the last byte is acknowledged. Before
  sending after an idle period longer than the RTO it applies Linux's ``tcp_cwnd_restart`` (RFC 2861,
  the scenario's ``slow_start_after_idle``), which ns-3's TCP does not do by itself; and for CUBIC,
  after any idle period, Linux's ``bictcp_cwnd_event``: the curve's epoch moves by the idle time
  (ns-3's ``TcpCubic`` has no ``CwndEvent`` and counts the idle time in W(t)).
* ``Job`` (app.h): alternates compute and communication over its flows and records per-iteration times,
  drops and ECN marks; ``Counters`` (counters.h) attributes queue drops and marks to jobs by source address.

Only Python decides topology, parameters and records (:mod:`mltcp.sim.ns3_engine`).
"""

from __future__ import annotations

from pathlib import Path

CXX_DIR = Path(__file__).with_name("ns3")
HEADER = CXX_DIR / "mltcp_ns3.h"

_loaded = False


def load():
    """Import ns-3 (PyPI ``ns3``) and compile the classes in ``ns3/*.h`` once per process; returns
    ``(ns, mltcpns3)``. Raises ImportError when ns-3 is not installed."""
    global _loaded
    from ns import ns  # noqa: F401  (PyPI ns3: loads the ns-3 libraries and headers into cppyy)
    import cppyy

    if not _loaded:
        cppyy.add_include_path(str(CXX_DIR))
        try:
            cppyy.include(str(HEADER))
        except ImportError as e:  # cppyy reports a failed compile as an ImportError
            raise RuntimeError(f"compiling the ns-3 helper classes ({HEADER}) failed: {e}") from e
        _loaded = True
    return ns, cppyy.gbl.mltcpns3
