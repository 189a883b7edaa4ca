"""P4Runtime entries for mltcp.p4, built with p4runtime-shell's TableEntry / CounterEntry.

No network: p4runtime-shell resolves names through its global P4Info context, which
:func:`use_p4info` (offline) or :meth:`SwitchConnection.attach` (from the device) sets.
Object names are the contract of docs/CONTRACTS.md.
"""

from __future__ import annotations

import contextlib
import io

import p4runtime_sh.shell as sh
from p4.v1 import p4runtime_pb2

from .topology import Route

T_IPV4_LPM = "MyIngress.ipv4_lpm"
T_ECN_THRESHOLD = "MyEgress.ecn_threshold"
A_IPV4_FORWARD = "MyIngress.ipv4_forward"
A_SET_ECN_THRESHOLD = "MyEgress.set_ecn_threshold"
K_IPV4_DST = "hdr.ipv4.dstAddr"
K_EGRESS_PORT = "standard_metadata.egress_port"
C_JOB_TX = "MyIngress.job_tx"
C_JOB_ECN_MARKS = "MyEgress.job_ecn_marks"
C_PARSE_ERRORS = "MyIngress.parse_errors"
R_JOB_BYTES_RATIO = "MyIngress.job_bytes_ratio"


def silent():
    """Swallow what p4runtime-shell prints while building entries.

    (Its `verbose` option cannot be turned off on its own: in p4runtime-shell 0.0.6 the enum
    members `verbose` and `canonical_bytestrings` have the same value, so setting verbose=False
    also switches to padded byte strings. We keep the canonical encoding and redirect stdout.)
    """
    return contextlib.redirect_stdout(io.StringIO())


def use_p4info(p4info) -> None:
    """Point p4runtime-shell's name resolution at `p4info` (a p4info_pb2.P4Info)."""
    sh.context.set_p4info(p4info)


def route_entry(route: Route) -> sh.TableEntry:
    """MyIngress.ipv4_lpm: prefix -> ipv4_forward(dstAddr=mac, port)."""
    with silent():
        te = sh.TableEntry(T_IPV4_LPM)(action=A_IPV4_FORWARD)
        te.match[K_IPV4_DST] = route.prefix
        te.action["dstAddr"] = route.mac
        te.action["port"] = str(route.port)
    return te


def ecn_entry(port: int, threshold: int | None = None) -> sh.TableEntry:
    """MyEgress.ecn_threshold: egress port -> set_ecn_threshold(threshold).

    With threshold None the entry has only its key (enough to delete it).
    """
    with silent():
        if threshold is None:
            te = sh.TableEntry(T_ECN_THRESHOLD)
        else:
            te = sh.TableEntry(T_ECN_THRESHOLD)(action=A_SET_ECN_THRESHOLD)
            te.action["threshold"] = str(threshold)
        te.match[K_EGRESS_PORT] = str(port)
    return te


def counter_entry(name: str) -> sh.CounterEntry:
    """Wildcard read of every index of an indirect counter."""
    with silent():
        return sh.CounterEntry(name)


def counter_read_entity(name: str) -> p4runtime_pb2.Entity:
    """The shell's wildcard CounterEntry, wrapped in a p4runtime_pb2.Entity for a raw Read."""
    ent = p4runtime_pb2.Entity()
    ent.counter_entry.CopyFrom(counter_entry(name).msg())
    return ent


def register_read_entity(name: str) -> p4runtime_pb2.Entity:
    """Wildcard read of a register. p4runtime-shell 0.0.6 has no RegisterEntry, so this is a
    raw p4runtime_pb2 message (the id still comes from the shell's P4Info context)."""
    reg = next((r for r in sh.context.p4info.registers if r.preamble.name == name), None)
    if reg is None:
        raise KeyError(f"register {name!r} not in the P4Info")
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = reg.preamble.id
    return ent
