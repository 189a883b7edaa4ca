"""The congestion-control interface, shaped like Linux's ``struct tcp_congestion_ops`` and ns-3's
``TcpCongestionOps``.

Operations (the caller decides when each applies, as the TCP core does in Linux):

* :meth:`CongestionOps.pkts_acked` -- every ACK (batch): RTT sample, MLTCP's iteration tracker;
* :meth:`CongestionOps.in_ack_event` -- every ACK (batch) with the bytes it acknowledged and those
  of them that arrived CE-marked (Linux ``in_ack_event``; DCTCP's marked fraction);
* :meth:`CongestionOps.cong_avoid` -- window growth (slow start + avoidance), only when the flow is
  cwnd-limited and not in recovery (Linux ``tcp_cong_control`` -> ``tcp_may_raise_cwnd``);
* :meth:`CongestionOps.cwnd_event` -- ``TX_START``: the first send after the flow went idle (restart
  after idle, RFC 2861 / Linux ``tcp_cwnd_restart``, then the algorithm's own reaction);
* :meth:`CongestionOps.ssthresh` / :meth:`CongestionOps.on_congestion` / :meth:`CongestionOps.on_timeout`
  -- one window reduction per loss or ECN round trip, and the retransmission timeout;
* rate-based algorithms (DCQCN) have :meth:`on_cnp`, :meth:`on_timer`, :meth:`on_sent` instead.

One code base for the simulator and the real senders: each operation is a numba-compiled kernel
over one flow ``i`` of a few float arrays (:class:`FlowState` ``tcp``: cwnd/ssthresh/rate, and the
algorithm's own typed state ``ca``). The simulator's compiled loop calls the kernels directly
(:mod:`mltcp.cc.dispatch`); the methods here call the same kernels for the flows of a mask, so a
real sender runs them on arrays of length 1.

Parameters are declared on the algorithm class as :class:`Param` (default, unit, the scenario
field and its unit), as ns-3's ``GetTypeId().AddAttribute``; the scenario loader reads them there.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

import numpy as np
from numba import njit

CongestionKind = Literal["loss", "ecn"]
TX_START = "tx_start"  # CA_EVENT_TX_START: first transmission with nothing in flight

# columns of FlowState.tcp (the tcp_sock fields every algorithm shares)
CWND, SSTHRESH, RATE = 0, 1, 2


# ---- parameters ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One algorithm parameter, declared on the class: ``beta = Param(0.5, "1", "...")``.

    ``default`` and ``unit`` are the attribute's (what the constructor takes); in a scenario's
    ``[cc_params.<algo>]`` table the parameter is spelled ``key`` (default: the attribute name) in
    ``key_unit``, and ``key value x scale`` gives the attribute value."""

    default: Any
    unit: str = "1"
    doc: str = ""
    key: str | None = None
    scale: float = 1.0
    key_unit: str | None = None
    in_scenario: bool = True  # False: set by the caller (e.g. DCQCN's line rate), not by a file
    name: str = ""
    choices: tuple = ()  # a str parameter's allowed values
    bounds: str = ""  # a number's allowed interval, e.g. "(0, 1]" or "[1, 64]"

    def refuse(self, v: Any) -> str:
        """Why ``v`` (attribute units) is outside ``bounds`` ('' = fine)."""
        if not self.bounds or isinstance(v, (str, bool)):
            return ""
        lo, hi = (float(x) for x in self.bounds[1:-1].split(","))
        ok_lo = v > lo if self.bounds[0] == "(" else v >= lo
        ok_hi = v < hi if self.bounds[-1] == ")" else v <= hi
        return "" if ok_lo and ok_hi else f"must be in {self.bounds}"

    @property
    def kind(self) -> type:
        return type(self.default)

    def from_scenario(self, v: Any) -> Any:
        """Scenario value -> attribute value; ValueError with the reason when it does not fit."""
        if self.kind is str:
            if not isinstance(v, str) or (self.choices and v not in self.choices):
                raise ValueError(f"must be one of {', '.join(map(repr, self.choices))} (got {v!r})")
            return v
        if self.kind is bool:
            if not isinstance(v, bool):
                raise ValueError(f"must be true or false (got {v!r})")
            return v
        if self.kind is int:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"must be a non-negative integer (got {v!r})")
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v) * self.scale
        raise ValueError(f"must be a positive number (got {v!r})")


class CaState:
    """An algorithm's own per-flow state (Linux ``inet_csk_ca``): one float64 column per name in
    ``fields``, readable as attributes (``st.ca.w_max`` is the column, a view)."""

    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n: int):
        self.a = np.zeros((n, max(1, len(self.fields))))

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for j, f in enumerate(cls.fields):
            setattr(
                cls,
                f,
                property(lambda self, j=j: self.a[:, j], lambda self, v, j=j: self.a.__setitem__((slice(None), j), v)),
            )

    @classmethod
    def columns(cls):
        """The state's columns as named indices (``S.w_max`` is w_max's column in ``ca``)."""
        return namedtuple(f"{cls.__name__}Columns", cls.fields)(*range(len(cls.fields)))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{f}={self.a[:, j]}' for j, f in enumerate(self.fields))})"


class FlowState:
    """Per-flow state shared by every algorithm (Linux ``tcp_sock``): ``cwnd``/``ssthresh`` in bytes,
    ``rate`` in bytes/s (rate-based algorithms), as views of the ``tcp`` array; ``ca`` is the
    algorithm's :class:`CaState`; ``tracker`` is MLTCP's iteration tracker (None otherwise)."""

    def __init__(self, n: int, mss: int, now: float, ca: CaState):
        self.n = n
        self.mss = float(mss)
        self.tcp = np.zeros((n, 3))
        self.tcp[:, CWND] = 10.0 * mss  # RFC 6928 initial window
        self.tcp[:, SSTHRESH] = np.inf
        self.ca = ca
        self.tracker = None
        self.created = now

    cwnd = property(lambda s: s.tcp[:, CWND], lambda s, v: s.tcp.__setitem__((slice(None), CWND), v))
    ssthresh = property(lambda s: s.tcp[:, SSTHRESH], lambda s, v: s.tcp.__setitem__((slice(None), SSTHRESH), v))
    rate = property(lambda s: s.tcp[:, RATE], lambda s, v: s.tcp.__setitem__((slice(None), RATE), v))


# ---- kernels shared by the window-based algorithms (one flow i) -----------------------------------


@njit(cache=True)
def slow_start(tcp, i, acked):
    """RFC 5681 slow start capped at ssthresh (Linux tcp_slow_start); returns the acked bytes left
    over for congestion avoidance."""
    cwnd, ssth = tcp[i, CWND], tcp[i, SSTHRESH]
    if cwnd >= ssth:
        return acked
    grown = min(cwnd + acked, max(ssth, cwnd))
    tcp[i, CWND] = grown
    return max(acked - (grown - cwnd), 0.0)


@njit(cache=True)
def reduce_to(tcp, i, ssth, mss):
    """Loss or ECN reduction: cwnd = ssthresh = max(new ssthresh, 2 MSS)."""
    s = max(ssth, 2.0 * mss)
    tcp[i, SSTHRESH] = s
    tcp[i, CWND] = s


@njit(cache=True)
def timeout_to(tcp, i, ssth, mss):
    """Retransmission timeout: ssthresh as for loss, window back to one segment (RFC 5681)."""
    tcp[i, SSTHRESH] = max(ssth, 2.0 * mss)
    tcp[i, CWND] = mss


@njit(cache=True)
def cwnd_restart(tcp, i, idle, rto, mss):
    """Linux tcp_cwnd_restart (RFC 2861; net.ipv4.tcp_slow_start_after_idle, on by default): after
    an idle period longer than the RTO, halve cwnd once per further RTO elapsed, not below the
    initial window, keeping ssthresh at >= 3/4 of the old window. Returns True if it applied."""
    if not idle > rto:
        return False
    cwnd = tcp[i, CWND]
    tcp[i, SSTHRESH] = max(tcp[i, SSTHRESH], 0.75 * cwnd)
    restart = min(10.0 * mss, cwnd)
    halvings = min(math.ceil(idle / rto) - 1.0, 60.0)  # while ((delta -= rto) > 0) cwnd >>= 1
    tcp[i, CWND] = max(cwnd / 2.0**halvings, restart)
    return True


# ---- an algorithm's kernels: its ops struct ----------------------------------------------------------


@njit(cache=True)
def _noop_init(p, tcp, ca, i, now):
    pass


@njit(cache=True)
def _noop_ack(p, tcp, ca, i, acked, rtt, now, mss):
    pass


@njit(cache=True)
def _noop_event(p, tcp, ca, i, now, idle):
    pass


@njit(cache=True)
def _noop_ack_event(p, tcp, ca, i, acked, ce, rtt, now, mss):
    pass


@njit(cache=True)
def _noop_cnp(p, tcp, ca, i, now, dscale):
    pass


@njit(cache=True)
def _keep_ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND]


@njit(cache=True)
def _noop_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    pass


@njit(cache=True)
def _noop_timeout(p, tcp, ca, i, now, dscale, mss):
    pass


@njit(cache=True)
def _noop_timer(p, tcp, ca, i, now, gain):
    pass


@njit(cache=True)
def _noop_sent(p, tcp, ca, i, sent, now, gain):
    pass


@dataclass(frozen=True)
class Ops:
    """An algorithm's kernels, as Linux's ``struct tcp_congestion_ops``: numba functions over one
    flow ``i`` of the parameter vector ``p``, the shared ``tcp`` state and the algorithm's ``ca``;
    an algorithm lists the hooks it implements, the others do nothing. Window-based algorithms
    must have ``ssthresh``, ``cong_avoid``, ``on_congestion`` and ``on_timeout``; rate-based ones
    ``on_cnp`` and ``on_timer`` (and a ``next_timer`` state field: when the timer fires)."""

    init: Any = _noop_init  # (p, tcp, ca, i, now): a new flow
    pkts_acked: Any = _noop_ack  # (p, tcp, ca, i, acked, rtt, now, mss): every ACK
    in_ack_event: Any = _noop_ack_event  # (p, tcp, ca, i, acked, ce, rtt, now, mss): every ACK, CE bytes
    cong_avoid: Any = _noop_ack  # (p, tcp, ca, i, acked, gain, now, mss): window growth
    ssthresh: Any = _keep_ssthresh  # (p, tcp, ca, i, dscale) -> the ssthresh a reduction sets
    on_congestion: Any = _noop_congestion  # (p, tcp, ca, i, ecn, now, dscale, mss): one reduction
    on_timeout: Any = _noop_timeout  # (p, tcp, ca, i, now, dscale, mss): retransmission timeout
    cwnd_event: Any = _noop_event  # (p, tcp, ca, i, now, idle): TX_START after idle
    on_cnp: Any = _noop_cnp  # (p, tcp, ca, i, now, dscale): congestion notification
    on_timer: Any = _noop_timer  # (p, tcp, ca, i, now, gain): rate-increase timer
    on_sent: Any = _noop_sent  # (p, tcp, ca, i, sent, now, gain): bytes sent

    NOOPS: ClassVar[tuple] = (
        _noop_init,
        _noop_ack,
        _noop_ack_event,
        _noop_event,
        _noop_cnp,
        _noop_timer,
        _noop_sent,
        _keep_ssthresh,
        _noop_congestion,
        _noop_timeout,
    )

    def implemented(self) -> dict[str, Any]:
        """Hook name -> kernel, for the hooks this algorithm implements (not a default)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) not in self.NOOPS}


REGISTRY: dict[str, type["CongestionOps"]] = {}  # every algorithm by name, in the order they were defined
KINDS: list[type["CongestionOps"]] = []  # the algorithms with their own kernels, by kind


# ---- the ops classes ---------------------------------------------------------------------------------


class CongestionOps:
    """Base class. An algorithm is one module defining a subclass with its ``name``, its
    :class:`Param` attributes (the kernels' parameter vector, in declaration order), its
    :class:`CaState` type and its :class:`Ops`; defining the class registers it (``REGISTRY``, and
    a ``kind`` for the simulator's dispatch, :mod:`mltcp.cc.registry`). A subclass without ``ops``
    of its own (MLTCP's variants) runs its base algorithm's kernels. The methods below are the
    same for every algorithm."""

    name: ClassVar[str] = "base"
    kind: ClassVar[int] = -1
    window_based: ClassVar[bool] = True
    State: ClassVar[type[CaState]] = CaState
    params: ClassVar[dict[str, Param]] = {}
    ops: ClassVar[Ops] = Ops()
    kernel_names: ClassVar[tuple[str, ...]] = ()  # the parameters the kernels read, in vector order
    ns3_flight_ssthresh: ClassVar[bool] = (
        False  # at an RTO without RACK, ssthresh from the bytes in flight (ns-3 NewReno)
    )

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        params = {}
        for klass in reversed(cls.__mro__):
            for k, v in vars(klass).items():
                if isinstance(v, Param):
                    params[k] = v if v.name == k else Param(**{**v.__dict__, "name": k, "key": v.key or k})
        cls.params = params
        if "ops" in vars(cls):
            _register_kernels(cls)
        if "name" in vars(cls):
            REGISTRY[cls.name] = cls

    @classmethod
    def param_index(cls):
        """The kernels' parameter vector as named indices (``P.beta`` is beta's index in ``p``)."""
        return namedtuple(f"{cls.__name__}Params", cls.kernel_names)(*range(len(cls.kernel_names)))

    @classmethod
    def base_algorithm(cls) -> type["CongestionOps"]:
        """The class whose kernels this algorithm runs (itself, or an MLTCP variant's base)."""
        return KINDS[cls.kind]

    def __init__(self, **kw):
        unknown = sorted(set(kw) - set(self.params))
        if unknown:
            raise TypeError(f"{self.name}: unknown parameter {unknown[0]!r} (known: {', '.join(self.params)})")
        for k, prm in self.params.items():
            setattr(self, k, kw.get(k, prm.default))
            if why := prm.refuse(getattr(self, k)):
                raise ValueError(f"{self.name}: {k} {why}")
        self.check()
        self.p = np.asarray(self.kernel_params(), dtype=float)

    def check(self) -> None:
        """Refuse a combination of parameter values (ValueError); the bounds are checked before."""

    def kernel_params(self) -> list[float]:
        """The parameter vector the kernels read: the base algorithm's parameters in declaration
        order (:meth:`param_index` names their positions)."""
        return [float(getattr(self, k)) for k in self.kernel_names] or [0.0]

    @classmethod
    def scenario_fields(cls) -> dict[str, Param]:
        """Scenario spelling -> parameter (what ``[cc_params.<name>]`` accepts)."""
        return {p.key: p for p in cls.params.values() if p.in_scenario}

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.params}

    # -- lifecycle -------------------------------------------------------------------------------
    def new_state(self, n: int = 1, mss: int = 1448, now: float = 0.0) -> FlowState:
        st = FlowState(n, mss, now, self.State(n))
        for i in range(n):
            self.ops.init(self.p, st.tcp, st.ca.a, i, now)
        return st

    # -- MLTCP hooks (identity for the plain algorithms) ----------------------------------------------
    def increase_gain(self, st: FlowState) -> np.ndarray | float:
        """Multiplier of every window or rate increase (MLTCP's F(bytes_ratio))."""
        return 1.0

    def decrease_scale(self, st: FlowState) -> np.ndarray | float:
        """Multiplier of the fraction of the window (or rate) removed on congestion."""
        return 1.0

    def iteration_start(self, st: FlowState, mask) -> None:
        pass

    # -- events ------------------------------------------------------------------------------------
    def pkts_acked(self, st: FlowState, acked, rtt, now: float) -> None:
        """``acked`` bytes newly acknowledged per flow (0 = no ACK) with the RTT sample; always."""
        acked, rtt = _vec(acked, st.n), _vec(rtt, st.n)
        for i in np.flatnonzero(acked > 0):
            self.ops.pkts_acked(self.p, st.tcp, st.ca.a, i, acked[i], rtt[i], now, st.mss)

    def in_ack_event(self, st: FlowState, acked, ce, rtt, now: float) -> None:
        """``acked`` bytes newly acknowledged per flow, ``ce`` of them CE-marked; always (after
        :meth:`pkts_acked`). Only ECN-proportional algorithms (DCTCP) use it."""
        acked, ce, rtt = _vec(acked, st.n), _vec(ce, st.n), _vec(rtt, st.n)
        for i in np.flatnonzero(acked > 0):
            self.ops.in_ack_event(self.p, st.tcp, st.ca.a, i, acked[i], ce[i], rtt[i], now, st.mss)

    def cong_avoid(self, st: FlowState, acked, now: float) -> None:
        """Grow the window for ``acked`` bytes (slow start, then avoidance). Callers call it only
        when the flow is cwnd-limited and not in recovery."""
        acked = _vec(acked, st.n)
        gain = _vec(self.increase_gain(st), st.n)
        for i in np.flatnonzero(acked > 0):
            self.ops.cong_avoid(self.p, st.tcp, st.ca.a, i, acked[i], gain[i], now, st.mss)

    def on_ack(self, st: FlowState, acked, rtt, now: float) -> None:
        """pkts_acked then cong_avoid, for a caller that does not track cwnd limits or recovery."""
        self.pkts_acked(st, acked, rtt, now)
        self.cong_avoid(st, acked, now)

    def cwnd_event(
        self, st: FlowState, event: str, now: float, idle=0.0, rto=np.inf, restart: bool = True, mask=None
    ) -> np.ndarray:
        """``TX_START`` after ``idle`` seconds without sending: restart after idle (if ``restart``
        and idle > rto), then the algorithm's own reaction. Returns where the restart applied."""
        if event != TX_START:
            raise ValueError(f"unknown cwnd event {event!r}")
        m = np.ones(st.n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        idle, rto = _vec(idle, st.n), _vec(rto, st.n)
        done = np.zeros(st.n, dtype=bool)
        for i in np.flatnonzero(m):
            if restart and self.window_based:
                done[i] = cwnd_restart(st.tcp, i, idle[i], rto[i], st.mss)
            self.ops.cwnd_event(self.p, st.tcp, st.ca.a, i, now, idle[i])
        return done

    def ssthresh(self, st: FlowState) -> np.ndarray:
        """The slow-start threshold a reduction now would set (``.ssthresh``), per flow."""
        d = _vec(self.decrease_scale(st), st.n)
        return np.array([self.ops.ssthresh(self.p, st.tcp, st.ca.a, i, d[i]) for i in range(st.n)])

    def on_congestion(self, st: FlowState, mask, kind: CongestionKind, now: float) -> None:
        """One window reduction for the flows in ``mask`` (loss or ECN echo). Callers apply it at
        most once per round trip, as TCP does in recovery/CWR."""
        d = _vec(self.decrease_scale(st), st.n)
        for i in np.flatnonzero(np.broadcast_to(mask, (st.n,))):
            self.ops.on_congestion(self.p, st.tcp, st.ca.a, i, kind == "ecn", now, d[i], st.mss)

    def on_timeout(self, st: FlowState, mask, now: float) -> None:
        """Retransmission timeout for the flows in ``mask``."""
        d = _vec(self.decrease_scale(st), st.n)
        for i in np.flatnonzero(np.broadcast_to(mask, (st.n,))):
            self.ops.on_timeout(self.p, st.tcp, st.ca.a, i, now, d[i], st.mss)

    # Rate-based (DCQCN) events; window-based algorithms ignore them.
    def on_cnp(self, st: FlowState, mask, now: float) -> None:
        """A congestion notification for the flows in ``mask`` (rate-based algorithms)."""
        d = _vec(self.decrease_scale(st), st.n)
        for i in np.flatnonzero(np.broadcast_to(mask, (st.n,))):
            self.ops.on_cnp(self.p, st.tcp, st.ca.a, i, now, d[i])

    def on_timer(self, st: FlowState, now: float) -> None:
        """The rate-increase timer of every flow (rate-based algorithms)."""
        gain = _vec(self.increase_gain(st), st.n)
        for i in range(st.n):
            self.ops.on_timer(self.p, st.tcp, st.ca.a, i, now, gain[i])

    def on_sent(self, st: FlowState, sent, now: float) -> None:
        """``sent`` bytes went out per flow (rate-based algorithms' byte counter)."""
        sent, gain = _vec(sent, st.n), _vec(self.increase_gain(st), st.n)
        for i in np.flatnonzero(sent > 0):
            self.ops.on_sent(self.p, st.tcp, st.ca.a, i, sent[i], now, gain[i])


def _register_kernels(cls) -> None:
    """An algorithm with kernels of its own: check its ops as Linux's tcp_register_congestion_control
    does, give it a kind (its branch in the simulator's dispatch) and its kernel parameters."""
    need = ("ssthresh", "cong_avoid", "on_congestion", "on_timeout") if cls.window_based else ("on_cnp", "on_timer")
    have = cls.ops.implemented()
    if missing := [h for h in need if h not in have]:
        raise TypeError(f"congestion control {cls.__name__}: ops lacks {', '.join(missing)}")
    if not cls.window_based and "next_timer" not in cls.State.fields:
        raise TypeError(f"congestion control {cls.__name__}: a rate-based state needs a next_timer field")
    inherited = next((c.kernel_names for c in cls.__mro__[1:] if getattr(c, "kernel_names", ())), ())
    cls.kernel_names = inherited + tuple(k for k, v in vars(cls).items() if isinstance(v, Param) and k not in inherited)
    same = [i for i, c in enumerate(KINDS) if c.__module__ == cls.__module__ and c.__qualname__ == cls.__qualname__]
    cls.kind = same[0] if same else len(KINDS)  # a module loaded again replaces its algorithm
    if same:
        KINDS[cls.kind] = cls
    else:
        KINDS.append(cls)


def _vec(x, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=float), (n,))
