"""The simulator's state: column constants of its float matrices and the groups of arrays the
compiled loop (:mod:`mltcp.sim.loop`) passes between its phases.

Each group is a ``typing.NamedTuple`` of numpy arrays (numba compiles attribute access on it to a
field load): :class:`Config` the run's constants, :class:`Cc` the congestion-control core's state,
:class:`Topology` flows, paths and jobs as the scenario fixed them, :class:`Links` the links' and
band queues' state, :class:`Flows` each flow's sender state, :class:`Jobs` each job's iteration,
:class:`Feedback` the ring of feedback in flight, :class:`Records` the iteration records. Counters
that survive between chunks of a run are the ``ks`` (int) and ``fs`` (float) vectors (I_*, F_*).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

CNP_INTERVAL = 50e-6  # at most one CNP per flow per 50 us (DCQCN notification point)

# index of each scalar in the run's float / int state vectors (kept between chunks)
F_TOT_DROP, F_TOT_MARK, F_TOT_SENT, F_TOT_ACKED, F_T, F_TOT_RTO, F_TOT_TLP, F_TOT_PAUSE, F_TOT_REORDER = range(9)
I_K, I_STEPS, I_NREC, I_SEEDED, I_STATUS, I_HEAP, I_ACT, I_RING, I_COMM, I_DONE = range(10)
RUNNING, DONE, PAUSED, OVER_HORIZON, TRACE_FULL = 0, 1, 2, 3, 4
NEVER = 1 << 62  # a slot that never comes
# links, one row each (a row per link keeps what a packet's hop needs in one cache line):
L_RATE, L_BUF, L_MODE, L_K, L_KMIN, L_KMAX, L_PMAX, L_XOFF = range(8)  # lp: rate B/s, buffer B, ECN, PFC (0: lossy)
# ls: all that a slot's hops read and write (one 64-byte line per link): queue, slot of its last
# update, bytes arriving this slot (> 0 marks the link touched), drop and mark fractions, 1 / rate,
# bytes served per slot (rate x step), buffer
Q, QK, ARRIVE, PDROP, PMARK, INV_RATE, CDT, BUF = range(8)
# loss recovery, one row per flow (lr): retransmissions queued (part of to_send, sent before new
# data), retransmissions sent this slot, bytes whose recovery waits for a timer, when it fires,
# RTO backoff, whether that timer is a tail-loss probe, whether a probe was sent since new data was
# acked, the fast retransmission still to send whatever the window (RFC 6675: on entering recovery),
# until when the flow is in a loss episode (Linux CA_Recovery / CA_Loss; an ECN reduction, CA_CWR,
# does not count)
LR_RTX, LR_RTX_SENT, LR_HOLE, LR_RTO_AT, LR_BACKOFF, LR_PROBE, LR_PROBED, LR_FRTX, LR_LOSS_REC = range(9)
LR_LEN = 9
TLP_EXTRA = 0.002  # Linux tail-loss probe timeout: 2 srtt + TCP_TIMEOUT_MIN (2 jiffies at HZ=1000)


class BandFifoOverflow(RuntimeError):
    """A priority band's FIFO at a link is full (the compiled loop raises it; the engine reruns the
    same seed with more room, :data:`mltcp.sim.engine.FIFO_ROOMS`)."""


# ---- in-network policy (mltcp.progress_policy): the switch acts on each packet's bytes_ratio --------
PP_BANDS, PP_SHIFT, PP_LO, PP_HI, PP_PECN, PP_SHARED, PP_PIN, PP_WINDOW = range(8)  # pp: the policy's parameters
#     (priority_ecn code, priority_buffer shared 1 / per-band 0, contest window in seconds, 0: none)
PQ_Q, PQ_ARR, PQ_DROP, PQ_MARK = range(4)  # pq[link, band]: strict-priority band queues
PC_JOB, PC_SEEN = range(2)  # pq[link, 0] under ecn-by-progress: the last job at the link + 1, when it last changed (s)
# what waits in a band queue, per (link, band) a FIFO of sends (pe_f: the flow; pe_v: the columns
# below; pe_hn[link, band] = head, count): a band queue serves its packets when the bands above leave
# it room, so their feedback is timed at dequeue (a departure fixed at enqueue would let a band
# below send while a band above holds the link)
PE_REM, PE_DELIV, PE_LOST, PE_MKD, PE_LRTX, PE_EXTRA, PE_KENQ = range(7)
I_PE, I_CREDIT_ZERO = 10, 11  # ks: sends waiting in band FIFOs; NIC budgets zeroed while every job computes
KS_LEN, FS_LEN = 12, 9


class Config(NamedTuple):
    """The run's constants."""

    horizon: float  # simulated seconds after which the run is refused
    dt: float  # slot (s)
    mss: float
    min_rto: float
    ssai: bool  # slow start after idle (RFC 2861)
    packet_losses: bool  # loss_model = "packet" (whole packets) rather than "fluid"
    seed: int
    nic_backlog: float  # segments
    rack: bool  # loss_recovery = "linux" (RACK-TLP) rather than "ns3"
    skip: bool  # skip the slots in which nothing can happen
    pol: int  # switch policy: 0 none, 1 ecn-by-progress, 2 priority-by-progress
    trace_interval: float  # rate trace bin (s; 0: none)
    window: bool  # window-based algorithm (else rate-based: DCQCN)
    ecn: bool  # any link marks
    pfc: bool  # any lossless link
    ack_min_idle: float  # MLTCP's idle rule at the ACK (inf: off)
    flight_ssthresh: bool  # at an RTO, cwnd = the bytes in flight before the reduction (ns-3 NewReno without RACK)
    timer_col: int  # a rate-based algorithm's next_timer column in ca (-1: window-based)


class Cc(NamedTuple):
    """The congestion-control core: the algorithm (kind, parameter vector), the shared per-flow
    window/rate state (tcp), the algorithm's own (ca), MLTCP's hook vector and iteration tracker."""

    kind: int
    p: np.ndarray
    mltcp: bool
    mp: np.ndarray
    tcp: np.ndarray
    ca: np.ndarray
    tr: np.ndarray


class Topology(NamedTuple):
    """Flows, their paths and their jobs (job j owns flows job_ptr[j] .. job_ptr[j + 1] - 1; flow
    f crosses links path_link[path_ptr[f] .. path_ptr[f + 1] - 1])."""

    flow_job: np.ndarray
    path_ptr: np.ndarray
    path_link: np.ndarray
    base_rtt: np.ndarray
    access: np.ndarray  # NIC rate (B/s)
    flow_bytes: np.ndarray  # each flow's share of an iteration
    job_ptr: np.ndarray
    iters: np.ndarray
    comp: np.ndarray  # compute time of each job's iterations


class Links(NamedTuple):
    """Links (lp: L_* parameters, ls: Q.. state), the switch policy (pp, on_pol, pq: band queues)
    and the band FIFOs of priority-by-progress (pe_*: PE_* columns); touched: a slot's links."""

    lp: np.ndarray
    ls: np.ndarray
    on_pol: np.ndarray
    pp: np.ndarray
    pq: np.ndarray
    pe_f: np.ndarray
    pe_v: np.ndarray
    pe_hn: np.ndarray
    touched: np.ndarray  # scratch: the links a slot's sends touched
    q_end: np.ndarray  # scratch: each band queue's size after a slot


class Flows(NamedTuple):
    """Each flow's sender: bytes to send, unacknowledged and in flight, NIC and rate budgets,
    recovery and pause deadlines, RTT estimate, loss recovery (lr: LR_* columns), the active-flow
    list (act, act_pos), the next slot to look at it (wake), its band (fband, pin_*), and the
    slot's sends (send, sending)."""

    to_send: np.ndarray
    unacked: np.ndarray
    inflight: np.ndarray
    credit: np.ndarray
    rcredit: np.ndarray
    recovery_until: np.ndarray
    paused_until: np.ndarray
    last_cnp: np.ndarray
    last_tx: np.ndarray
    cwnd_limited: np.ndarray
    srtt: np.ndarray
    rttvar: np.ndarray
    flow_done: np.ndarray
    act: np.ndarray
    act_pos: np.ndarray
    wake: np.ndarray
    credit_k: np.ndarray
    lr: np.ndarray
    fband: np.ndarray
    pin_n: np.ndarray
    pin_b: np.ndarray
    pe_last: np.ndarray
    send: np.ndarray
    sending: np.ndarray


class Jobs(NamedTuple):
    """Each job's phase (0 compute, 1 communicate, 2 finished), iteration and its counts, and the
    heap of computing jobs by compute end."""

    phase: np.ndarray
    it_idx: np.ndarray
    it_start: np.ndarray
    comm_start: np.ndarray
    it_drops: np.ndarray
    it_marks: np.ndarray
    flows_left: np.ndarray
    heap_t: np.ndarray
    heap_j: np.ndarray


class Feedback(NamedTuple):
    """The feedback ring, slot s: flows ring[s, :ring_n[s]] with ring_v[s, e] = (acked, lost,
    marked bytes, RTT, lost retransmitted bytes); each flow's latest entry (slot, index)."""

    ring: np.ndarray
    ring_v: np.ndarray
    ring_n: np.ndarray
    last_slot: np.ndarray
    last_entry: np.ndarray


class Records(NamedTuple):
    """The iteration records, in the order iterations end (ks[I_NREC] of them)."""

    job: np.ndarray
    iteration: np.ndarray
    start: np.ndarray
    comm: np.ndarray
    end: np.ndarray
    drops: np.ndarray
    marks: np.ndarray


@njit(cache=True, _nrt=False)
def _slot_at(t, dt):
    """The first slot k with k * dt >= t (the loop's own test)."""
    k = max(int(math.floor(t / dt)) - 1, 0)
    while k * dt < t:
        k += 1
    return k
