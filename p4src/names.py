"""mltcp.p4's control-plane objects, written once: names, match fields, action parameters and
their widths, table/counter/register sizes (the contract of docs/CONTRACTS.md).

Used by the control plane (controlplane/entries.py), the software switch
(emulation/switch/pipeline.py, p4info.py) and the P4Info generator (p4src/gen_p4info.py);
tests/test_p4info.py checks it against p4src/mltcp.p4 and p4c's own P4Info. Pure data, no
protobuf: ids are not here (they come from the P4Info, see :mod:`mltcp.p4src.p4info`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

JOB_SLOTS = 1024  # job_tx, job_ecn_marks, job_bytes_ratio: one cell per MLTCP job id
PORT_BITS = 9  # v1model egress_spec / egress_port
THRESHOLD_BITS = 19  # queue depth (v1model enq_qdepth)
MAC_BITS = 48
IPV4_BITS = 32
BYTES_RATIO_BITS = 16  # Q0.16 fraction carried by the MLTCP shim
WINDOW_BITS = 32  # set_contest_window(window), microseconds
TIMESTAMP_BITS = 48  # v1model egress_global_timestamp
BAND_BITS = 4  # progress band: bytes_ratio[15:12] (mltcp.progress_policy.HW_BANDS = 16)
PRIORITY_BITS = 3  # v1model standard_metadata.priority

T_IPV4_LPM = "MyIngress.ipv4_lpm"
T_ECN_THRESHOLD = "MyEgress.ecn_threshold"
A_IPV4_FORWARD = "MyIngress.ipv4_forward"
A_DROP = "MyIngress.drop"
A_NOACTION = "NoAction"
A_SET_ECN_THRESHOLD = "MyEgress.set_ecn_threshold"
# in-network MLTCP (docs/in-network.md): tables by (port, progress band)
T_PROGRESS_PRIORITY = "MyIngress.progress_priority"
T_PROGRESS_ECN = "MyEgress.progress_ecn"
A_SET_PROGRESS_PRIORITY = "MyIngress.set_progress_priority"
A_SET_PROGRESS_ECN = "MyEgress.set_progress_ecn"
A_NO_PROGRESS_ECN = "MyEgress.no_progress_ecn"  # priority_ecn = off: the band is never marked
T_PROGRESS_CONTEST = "MyEgress.progress_contest"  # egress port -> the window of contest_seen (us)
A_SET_CONTEST_WINDOW = "MyEgress.set_contest_window"
P_WINDOW = "window"  # set_contest_window(window): microseconds
R_CONTEST_JOB = "MyEgress.contest_job"  # per port: the last MLTCP job there, + 1
R_CONTEST_SEEN = "MyEgress.contest_seen"  # per port: when that job last changed (us)
P_PRIORITY = "priority"  # set_progress_priority(priority); set_progress_ecn(threshold)
K_EGRESS_SPEC = "standard_metadata.egress_spec"
K_PROGRESS_BAND = "meta.progress_band"
P_DST_ADDR = "dstAddr"  # ipv4_forward(dstAddr, port)
P_PORT = "port"
P_THRESHOLD = "threshold"  # set_ecn_threshold(threshold)
K_IPV4_DST = "hdr.ipv4.dstAddr"
K_EGRESS_PORT = "standard_metadata.egress_port"
C_JOB_TX = "MyIngress.job_tx"
C_JOB_ECN_MARKS = "MyEgress.job_ecn_marks"
C_PARSE_ERRORS = "MyIngress.parse_errors"
R_JOB_BYTES_RATIO = "MyIngress.job_bytes_ratio"

ROUTE_TABLE_SIZE = 1024
ECN_TABLE_SIZE = 512
PROGRESS_TABLE_SIZE = 8192  # 512 ports x 16 bands


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[tuple[str, int], ...] = ()  # (name, bitwidth), in P4 order (ids 1, 2, ...)
    annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[tuple[str, int, str], ...]  # (field name, bitwidth, match type), ids 1, 2, ...
    actions: tuple[str, ...]
    size: int
    default_action: str


@dataclass(frozen=True)
class Counter:
    name: str
    unit: str  # PACKETS | BYTES | BOTH
    size: int


@dataclass(frozen=True)
class Register:
    name: str
    bitwidth: int
    size: int


@dataclass
class Program:
    arch: str
    tables: list[Table] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    counters: list[Counter] = field(default_factory=list)
    registers: list[Register] = field(default_factory=list)

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)

    def action(self, name: str) -> Action:
        return next(a for a in self.actions if a.name == name)


MLTCP_V1MODEL = Program(
    arch="v1model",
    tables=[
        Table(
            T_IPV4_LPM,
            ((K_IPV4_DST, IPV4_BITS, "LPM"),),
            (A_IPV4_FORWARD, A_DROP, A_NOACTION),
            ROUTE_TABLE_SIZE,
            default_action=A_DROP,
        ),
        Table(
            T_PROGRESS_PRIORITY,
            ((K_EGRESS_SPEC, PORT_BITS, "EXACT"), (K_PROGRESS_BAND, BAND_BITS, "EXACT")),
            (A_SET_PROGRESS_PRIORITY, A_NOACTION),
            PROGRESS_TABLE_SIZE,
            default_action=A_NOACTION,
        ),
        Table(
            T_ECN_THRESHOLD,
            ((K_EGRESS_PORT, PORT_BITS, "EXACT"),),
            (A_SET_ECN_THRESHOLD, A_NOACTION),
            ECN_TABLE_SIZE,
            default_action=A_NOACTION,
        ),
        Table(
            T_PROGRESS_CONTEST,
            ((K_EGRESS_PORT, PORT_BITS, "EXACT"),),
            (A_SET_CONTEST_WINDOW, A_NOACTION),
            ECN_TABLE_SIZE,
            default_action=A_NOACTION,
        ),
        Table(
            T_PROGRESS_ECN,
            ((K_EGRESS_PORT, PORT_BITS, "EXACT"), (K_PROGRESS_BAND, BAND_BITS, "EXACT")),
            (A_SET_PROGRESS_ECN, A_NO_PROGRESS_ECN, A_NOACTION),
            PROGRESS_TABLE_SIZE,
            default_action=A_NOACTION,
        ),
    ],
    actions=[
        # core.p4 of current p4c declares NoAction with @noWarn("unused").
        Action(A_NOACTION, annotations=('@noWarn("unused")',)),
        Action(A_DROP),
        Action(A_IPV4_FORWARD, ((P_DST_ADDR, MAC_BITS), (P_PORT, PORT_BITS))),
        Action(A_SET_PROGRESS_PRIORITY, ((P_PRIORITY, PRIORITY_BITS),)),
        Action(A_SET_ECN_THRESHOLD, ((P_THRESHOLD, THRESHOLD_BITS),)),
        Action(A_SET_PROGRESS_ECN, ((P_THRESHOLD, THRESHOLD_BITS),)),
        Action(A_NO_PROGRESS_ECN),
        Action(A_SET_CONTEST_WINDOW, ((P_WINDOW, WINDOW_BITS),)),
    ],
    counters=[
        Counter(C_JOB_TX, "BOTH", JOB_SLOTS),
        Counter(C_PARSE_ERRORS, "PACKETS", 1),
        Counter(C_JOB_ECN_MARKS, "PACKETS", JOB_SLOTS),
    ],
    registers=[
        Register(R_JOB_BYTES_RATIO, BYTES_RATIO_BITS, JOB_SLOTS),
        Register(R_CONTEST_JOB, 16, ECN_TABLE_SIZE),
        Register(R_CONTEST_SEEN, TIMESTAMP_BITS, ECN_TABLE_SIZE),
    ],
)
