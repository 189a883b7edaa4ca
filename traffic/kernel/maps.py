"""User-space view of the BPF maps in mltcp_cc.bpf.h: layouts, configuration, marks, reads.

The C structs and the struct formats below must stay in step; :func:`check_layouts` compares them
with the value sizes the kernel reports and is called before any map is used.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import time
from dataclasses import dataclass

from mltcp import defaults

from . import bpfsys

Q10 = 1 << 10
R_ONE = 1 << 16

# Variant name (as in tcp_available_congestion_control) -> (source file, map-name prefix).
VARIANTS: dict[str, tuple[str, str]] = {
    "mltcp_reno": ("mltcp_reno.bpf.c", "mreno_"),
    "mltcp_cubic": ("mltcp_cubic.bpf.c", "mcubic_"),
}

CFG = struct.Struct("<13I")  # struct mltcp_cfg
SK = struct.Struct("<9Q22I")  # struct mltcp_sk
EV = struct.Struct("<2Q14IQ")  # struct mltcp_trace_ev
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
FLAG_SCALE_DECREASE = 1
FLAG_TRACE_ALL = 2
FLAG_NIC_CAP = 4
FLAG_ADAPTIVE = 8
EV_GROW, EV_FRIENDLY, EV_SSTHRESH, EV_STATE = 1, 2, 3, 4
STAT_NAMES = (
    "ssthresh_repairs",
    "repairs_not_ours",
    "cwnd_repairs",
    "ssthresh_calls",
    "state_calls",
    "iteration_restarts",
)
STAT_SSTHRESH_REPAIRS, STAT_REPAIRS_NOT_OURS, STAT_ITERATION_RESTARTS = 0, 1, 5
EV_REPAIR, EV_ACK, EV_RESTART = 5, 6, 7
MAX_RESTART_SEGS = 1_000_000
TRACE_SLOTS = 65536


class MapsError(RuntimeError):
    pass


# Whether F also scales the window decrease, by default, per variant (the CLI's default when
# --scale-decrease/--no-scale-decrease is not given). mltcp_cubic scales it: with CUBIC's own 30 %
# cut alone the flow behind keeps too much window and the jobs interleave late or not at all; with
# the scaled cut it reached the ideal iteration in every run measured (docs/kernel.md, "mltcp_cubic
# with the scaled decrease").
SCALE_DECREASE_DEFAULT = {"mltcp_reno": False, "mltcp_cubic": True}
# what each variant takes for above_bdp_gain when the configuration leaves it unset (its .bpf.c's
# MLTCP_DEF_ABOVE_BDP_Q10; a test holds them equal): the shipped default of its base
ABOVE_BDP_DEFAULT = {v: defaults.above_bdp_gain(v.removeprefix("mltcp_")) for v in VARIANTS}


@dataclass(frozen=True)
class Config:
    """MLTCP parameters written into the cfg map (global) or the pcfg map (one job's port)."""

    slope: float = defaults.SLOPE
    intercept: float = defaults.INTERCEPT
    idle_fraction: float = 0.9
    min_idle: float = 1e-3  # seconds
    scale_decrease: bool = False
    trace_port: int = 0  # local port whose growth steps are traced (0 = none)
    trace_all: bool = False  # trace every socket (global configuration only)
    nic_cap: bool = False  # no growth past 2 F(r) x pacing rate x min RTT, at least 1 x (paced senders only)
    restart_window: int = 0  # segments: cwnd at an iteration's first send is at most this (0 = off)
    adaptive: bool = defaults.ADAPTIVE  # the online switch (mltcp.engage): F only while the iterations interleave
    trial: int = defaults.TRIAL  # adaptive: judge every this many engaged iterations
    contended_above: float = defaults.CONTENDED_ABOVE  # adaptive: contended = comm > this x bytes at the best rate
    hold_max: int = defaults.HOLD_MAX  # adaptive: longest wait (iterations) before engaging again
    # segments: below this window (or the path BDP if less) F never slows the increase (0 = off)
    min_window: int = defaults.MIN_WINDOW
    # once disengaged, a window above the path BDP grows x this (1 = as the base); None: the variant's
    # built-in default (MLTCP_DEF_ABOVE_BDP_Q10 of its .bpf.c, ABOVE_BDP_DEFAULT)
    above_bdp_gain: float | None = None

    def validate(self) -> None:
        for name in ("slope", "intercept", "idle_fraction"):
            v = getattr(self, name)
            if not (0 <= v < 4_000_000):
                raise ValueError(f"{name} must be between 0 and 4e6, got {v}")
        if self.intercept == 0 and self.slope == 0:
            raise ValueError("slope and intercept are both 0: the window would never grow")
        if self.idle_fraction <= 0:
            raise ValueError(f"idle_fraction must be > 0, got {self.idle_fraction}")
        if not (0 <= self.min_idle <= 4000):
            raise ValueError(f"min_idle must be between 0 and 4000 s, got {self.min_idle}")
        if not (0 <= self.trace_port < 65536):
            raise ValueError(f"trace_port must be a port number, got {self.trace_port}")
        for name in ("restart_window", "min_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_RESTART_SEGS:
                raise ValueError(f"{name} must be a whole number of segments from 0 to {MAX_RESTART_SEGS}, got {v!r}")
        for name in ("trial", "hold_max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1_000_000:
                raise ValueError(f"{name} must be a whole number of iterations from 1 to 1000000, got {v!r}")
        if self.above_bdp_gain is not None and not 0 < self.above_bdp_gain <= 1:
            raise ValueError(f"above_bdp_gain must be in (0, 1], got {self.above_bdp_gain}")
        if not 1 < self.contended_above <= 100:
            raise ValueError(f"contended_above must be in (1, 100], got {self.contended_above}")

    def pack(self) -> bytes:
        self.validate()
        return CFG.pack(
            1,
            round(self.slope * Q10),
            round(self.intercept * Q10),
            round(self.idle_fraction * Q10),
            round(self.min_idle * 1e6),
            (FLAG_SCALE_DECREASE if self.scale_decrease else 0)
            | (FLAG_TRACE_ALL if self.trace_all else 0)
            | (FLAG_NIC_CAP if self.nic_cap else 0)
            | (FLAG_ADAPTIVE if self.adaptive else 0),
            self.trace_port,
            self.restart_window,
            self.trial,
            round(self.contended_above * Q10),
            self.hold_max,
            self.min_window,
            0 if self.above_bdp_gain is None else max(1, round(self.above_bdp_gain * Q10)),
        )


# the [mltcp] keys (hook Param names) the BPF variants model, as Config fields
HOOK_KNOBS = (
    "slope",
    "intercept",
    "idle_fraction",
    "min_idle",
    "scale_decrease",
    "restart_window",
    "adaptive",
    "trial",
    "contended_above",
    "hold_max",
    "min_window",
    "above_bdp_gain",
)


def config_from_hook(hook: dict) -> Config:
    """A scenario's ``[mltcp]`` table (hook Param names, SI units) as the kernel's Config; the
    shipped default where the table is silent. Raises ValueError naming a key the BPF variants do
    not model, or a value they cannot take."""
    unmodelled = sorted(set(hook) - set(HOOK_KNOBS))
    if unmodelled:
        raise ValueError(
            f"the kernel's MLTCP variants do not model {', '.join(unmodelled)} (they model: {', '.join(HOOK_KNOBS)})"
        )
    segments = ("restart_window", "min_window")  # whole segments: 4.0 from a TOML float is 4
    cfg = Config(**{k: int(v) if k in segments and float(v).is_integer() else v for k, v in hook.items()})
    cfg.validate()
    return cfg


@dataclass(frozen=True)
class SocketState:
    """struct mltcp_sk of one socket."""

    iter_start_acked: int
    last_act_ns: int
    last_gap_ns: int
    hist: tuple[int, int, int]
    learned: int
    first_ack_ns: int
    best_rate_q10: int  # bytes per microsecond, Q10
    completed: int
    mark_gen: int
    r_q16: int
    slope_q10: int
    intercept_q10: int
    idle_frac_q10: int
    min_idle_us: int
    flags: int
    port: int
    last_ssthresh: int
    restart_segs: int
    last_comm_us: int
    engaged: int  # the online switch: 1 = F acts
    in_mode: int
    contended: int
    hold: int
    trial: int
    contended_q10: int
    hold_max: int
    min_window: int
    above_bdp_q10: int
    idle_us: int  # the current iteration's idle gaps so far

    @classmethod
    def unpack(cls, raw: bytes) -> "SocketState":
        v = SK.unpack(raw)
        return cls(v[0], v[1], v[2], tuple(v[3:6]), *v[6:])

    @property
    def bytes_ratio(self) -> float:
        return self.r_q16 / R_ONE

    @property
    def best_rate_mbit(self) -> float:
        """The best iteration rate, Mbit/s (best_rate_q10 is bytes per microsecond in Q10)."""
        return self.best_rate_q10 * 8 / Q10

    @property
    def last_stretch(self) -> float:
        """The last closed iteration's busy time over its bytes at the best rate (mltcp.engage.stretch:
        above contended_above it counted as contended; 1 before anything is known)."""
        if not (self.best_rate_q10 and self.last_comm_us and self.hist[0]):
            return 1.0
        return self.last_comm_us * self.best_rate_q10 / Q10 / self.hist[0]


@dataclass(frozen=True)
class TraceEvent:
    """struct mltcp_trace_ev: one traced growth step."""

    iter_acked: int
    learned: int
    port: int
    kind: int
    cwnd_in: int
    cnt_in: int
    acked: int
    w: int
    inc: int
    clamp: int
    r_q16: int
    f_q10: int
    cwnd_out: int
    cnt_out: int
    completed: int
    aux: int
    ts_ns: int

    @classmethod
    def unpack(cls, raw: bytes) -> "TraceEvent":
        return cls(*EV.unpack(raw))


def _bpftool_json(*args: str) -> object:
    try:
        out = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise MapsError("bpftool not found on PATH") from None
    except subprocess.CalledProcessError as e:
        raise MapsError(f"bpftool {' '.join(args)} failed: {e.stderr.strip() or e.stdout.strip()}") from None
    return json.loads(out.stdout or "[]")


def maps_named(prefixes: tuple[str, ...], after: int = 0):
    """Info of every map above id ``after`` whose name starts with one of ``prefixes``: a bpf(2)
    walk over the kernel's map ids (no bpftool), three syscalls per map."""
    for mid in bpfsys.map_ids(after):
        try:
            fd = bpfsys.map_fd_by_id(mid)
        except bpfsys.BpfError:
            continue  # freed meanwhile
        try:
            m = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        if m["name"].startswith(prefixes):
            yield m


def find_maps(variant: str, after: int = 0) -> dict[str, dict]:
    """The newest map of each name of a loaded variant: short name ("cfg", "mark", ...) -> info.

    Walks the kernel's map ids above ``after`` (:func:`maps_named`): about a millisecond for every
    map in the system."""
    prefix = VARIANTS[variant][1]
    found: dict[str, dict] = {}
    for m in maps_named((prefix,), after):
        short = m["name"][len(prefix) :]
        if short not in found or m["id"] > found[short]["id"]:
            found[short] = m
    return found


def check_layouts(maps: dict[str, dict]) -> None:
    want = {
        "cfg": CFG.size,
        "pcfg": CFG.size,
        "state": SK.size,
        "trace": EV.size,
        "mark": U32.size,
        "tcount": U64.size,
        "stats": U64.size,
    }
    for short, size in want.items():
        if short not in maps:
            raise MapsError(f"map {short!r} not found: is the variant loaded?")
        got = maps[short].get("bytes_value")
        if got != size:
            raise MapsError(f"map {maps[short]['name']}: value size {got}, Python layout expects {size}")


class VariantMaps:
    """Open fds on one loaded variant's maps."""

    def __init__(self, variant: str):
        if variant not in VARIANTS:
            raise MapsError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        self.variant = variant
        info = find_maps(variant)
        check_layouts(info)
        self.ids = {k: v["id"] for k, v in info.items()}
        self.fds = {k: bpfsys.map_fd_by_id(i) for k, i in self.ids.items()}

    def current(self) -> bool:
        """Whether no newer copy of the variant was loaded since these maps were opened. A reload
        makes maps with higher ids, so only the ids above ours are walked: a syscall or three per
        map made since, not a walk over every map in the system (it ran in the hot path of a mark,
        once a second: milliseconds before each DDP iteration's first all-reduce). Maps of a
        variant unloaded and not loaded again stay open and take marks no socket reads."""
        try:
            return "cfg" not in find_maps(self.variant, after=max(self.ids.values()))
        except bpfsys.BpfError:
            return False

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def __enter__(self) -> "VariantMaps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def write_config(self, cfg: Config, port: int | None = None) -> None:
        """Global configuration, or one job's (keyed by local port) when ``port`` is given."""
        if port is None:
            bpfsys.map_update(self.fds["cfg"], U32.pack(0), cfg.pack())
        else:
            bpfsys.map_update(self.fds["pcfg"], U32.pack(port), cfg.pack())

    def read_config(self) -> tuple[int, ...]:
        return CFG.unpack(bpfsys.map_lookup(self.fds["cfg"], U32.pack(0), CFG.size))

    def mark(self, port: int) -> int:
        """Bump the iteration generation of ``port``; returns the new generation."""
        key = U32.pack(port)
        raw = bpfsys.map_lookup(self.fds["mark"], key, U32.size)
        gen = (U32.unpack(raw)[0] + 1) & 0xFFFFFFFF if raw else 1
        bpfsys.map_update(self.fds["mark"], key, U32.pack(gen))
        return gen

    def marks(self) -> dict[int, int]:
        """The mark map: local port -> iteration generation (how many marks that port got)."""
        out = {}
        for k in bpfsys.map_keys(self.fds["mark"], U32.size):
            raw = bpfsys.map_lookup(self.fds["mark"], k, U32.size)
            if raw is not None:
                out[U32.unpack(k)[0]] = U32.unpack(raw)[0]
        return out

    def socket_state(self, sock: socket.socket) -> SocketState | None:
        raw = bpfsys.map_lookup(self.fds["state"], struct.pack("<i", sock.fileno()), SK.size)
        return SocketState.unpack(raw) if raw else None

    def trace_count(self) -> int:
        return U64.unpack(bpfsys.map_lookup(self.fds["tcount"], U32.pack(0), U64.size))[0]

    def stats(self) -> dict[str, int]:
        """Counters kept by the BPF programs (see mltcp_guard in mltcp_cc.bpf.h)."""

        def get(i):
            return U64.unpack(bpfsys.map_lookup(self.fds["stats"], U32.pack(i), U64.size))[0]

        return {name: get(i) for i, name in enumerate(STAT_NAMES)}

    def reset_trace(self) -> None:
        bpfsys.map_update(self.fds["tcount"], U32.pack(0), U64.pack(0))

    def read_trace(self) -> list[TraceEvent]:
        """Events in order (the last TRACE_SLOTS if more were written)."""
        n = self.trace_count()
        first = max(0, n - TRACE_SLOTS)
        out = []
        for i in range(first, n):
            raw = bpfsys.map_lookup(self.fds["trace"], U32.pack(i % TRACE_SLOTS), EV.size)
            out.append(TraceEvent.unpack(raw))
        return out


def loaded_variants() -> list[str]:
    names = {s.get("name") for s in _bpftool_json("struct_ops", "list")}
    return [v for v in VARIANTS if v in names]


REVALIDATE_S = 1.0
AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"
_open_maps: dict[str, tuple[VariantMaps, float]] = {}


def _cached(variant: str) -> VariantMaps:
    """Open maps of ``variant``, kept between calls; checked against the registered copy at most
    once every REVALIDATE_S seconds (a reload gives new maps)."""
    now = time.monotonic()
    ent = _open_maps.get(variant)
    if ent is not None:
        vm, checked = ent
        if now - checked < REVALIDATE_S:
            return vm
        if vm.current():
            _open_maps[variant] = (vm, now)
            return vm
        vm.close()
    vm = VariantMaps(variant)
    _open_maps[variant] = (vm, now)
    return vm


def close_cached() -> None:
    """Close the map fds :func:`mark_iteration_start` keeps open (they hold an unloaded variant's maps)."""
    global _names
    _names = (-1e9, [])
    for vm, _ in _open_maps.values():
        vm.close()
    _open_maps.clear()


_names: tuple[float, list[str]] = (-1e9, [])


def registered_names(max_age: float = 0.0) -> list[str]:
    """Our variants in tcp_available_congestion_control (a file read, no bpftool); with
    ``max_age`` the answer may be that many seconds old."""
    global _names
    now = time.monotonic()
    if now - _names[0] > max_age:
        with open(AVAILABLE) as f:
            avail = set(f.read().split())
        _names = (now, [v for v in VARIANTS if v in avail])
    return _names[1]


def mark_iteration_start(port: int, variants: list[str] | None = None) -> int:
    """Tell the kernel MLTCP that the socket bound to local ``port`` starts an iteration now.

    Written into every registered variant (a socket uses one of them), or into ``variants``.
    Returns how many were marked. The variants' maps are found once (a bpf(2) walk over the map
    ids) and kept open, so a mark is two map syscalls: microseconds."""
    if not (0 < port < 65536):
        raise ValueError(f"port must be 1..65535, got {port}")
    n = 0
    for v in variants or registered_names(REVALIDATE_S):
        _cached(v).mark(port)
        n += 1
    return n
