"""P4Runtime server (grpcio, p4runtime 1.4 protos) in front of the pipeline model.

Object ids come from the P4Info the controller pushes (looked up by name); the model itself only
knows names. The server is generic over the P4Info: it checks entries against it (ids, widths,
match kinds, action refs) and drives the tables the pipeline model offers by P4 name
(``Pipeline.tables``: what an action means and what a table does is the pipeline's business).
Anything the target cannot honour gets a gRPC status, never silence: the Write RPC
reports per-update errors the P4Runtime way (status UNKNOWN with one ``p4.v1.Error`` per update
in ``grpc-status-details-bin``), the other RPCs use the canonical code directly.

What follows P4Runtime 1.4 and how:

* Arbitration: the server remembers the highest election id it has seen (``election_id_past``);
  a client becomes primary only with an id >= that. When the primary disconnects nobody is
  promoted: the backups are told (NOT_FOUND, election_id = election_id_past) and stay backups
  (no writes) until one re-arbitrates with an id >= election_id_past. A stream without an
  election id is a backup for good; two live streams may not share an id.
* Pipeline actions validate everything before changing anything: RECONCILE_AND_COMMIT first
  re-keys every stored entry against the new P4Info on a scratch copy (an entry the new P4Info
  cannot express -> FAILED_PRECONDITION, nothing changed); after VERIFY_AND_SAVE, reads and
  writes refer to the saved P4Info and are staged, COMMIT installs exactly the staged state.
* Bytestrings: any length is accepted as long as the value fits the bitwidth (leading zero
  bytes allowed); empty -> INVALID_ARGUMENT, too large -> OUT_OF_RANGE; entries are stored and
  read back in canonical form (shortest string). ``is_const`` in a write is refused.
* Tables hold at most their P4Info ``size`` entries (RESOURCE_EXHAUSTED beyond).

Resources: each StreamChannel holds one worker thread of the gRPC pool (grpcio's sync server);
the pool is sized ``max_streams`` + ``unary_workers``, so idle streams can never starve unary
calls. When all ``max_streams`` slots are taken, the oldest stream that has not sent a
MasterArbitrationUpdate within ``arbitration_grace_s`` is closed to make room (idle
connections cannot lock a controller out); if every stream has arbitrated, the new one is
refused with RESOURCE_EXHAUSTED. A stream whose client does not read its arbitration updates is
closed once ``_STREAM_BACKLOG`` messages wait.
"""

from __future__ import annotations

import importlib.metadata
import logging
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from mltcp.p4src.p4info import P4InfoIndex, missing_objects

from . import pipeline as pl

log = logging.getLogger("mltcp.switch.p4rt")

SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest
Update = p4runtime_pb2.Update
Unit = p4info_pb2.CounterSpec.Unit
MatchType = p4info_pb2.MatchField.MatchType

_GRPC_TO_CODE = {s: s.value[0] for s in grpc.StatusCode}

DEFAULT_MAX_STREAMS = 32
DEFAULT_UNARY_WORKERS = 8
DEFAULT_ARBITRATION_GRACE_S = 2.0  # a stream silent this long may be closed to make room
_STREAM_BACKLOG = 64  # queued messages a stream's client has not read yet


class P4RTError(Exception):
    """An error with a canonical gRPC code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _err(code: grpc.StatusCode, message: str) -> P4RTError:
    return P4RTError(code, message)


def _to_int(value: bytes, bitwidth: int, what: str) -> int:
    """P4Runtime bytestring -> int: any length, the value must fit in ``bitwidth`` bits."""
    if not value:
        raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty bytestring")
    v = int.from_bytes(value, "big")
    if v >> bitwidth:
        raise _err(grpc.StatusCode.OUT_OF_RANGE, f"{what}: value {v:#x} does not fit in bit<{bitwidth}>")
    return v


def canonical(value: bytes) -> bytes:
    """The shortest bytestring for the same value (one zero byte for 0)."""
    v = int.from_bytes(value, "big")
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def _election(e: p4runtime_pb2.Uint128) -> int:
    return (e.high << 64) | e.low


def api_version() -> str:
    try:
        return importlib.metadata.version("p4runtime")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "1.4.1"


class _Stream:
    """One StreamChannel: its outgoing queue and its election id.

    ``arbitrated`` becomes True with the first MasterArbitrationUpdate; ``election`` stays None
    for a client that sent none (a backup for good)."""

    def __init__(self, context) -> None:
        self.out: queue.Queue = queue.Queue()
        self.context = context
        self.opened = time.monotonic()
        self.arbitrated = False
        self.election: int | None = None

    def send(self, item) -> None:
        if self.out.qsize() >= _STREAM_BACKLOG:
            log.warning("stream client reads nothing (%d messages queued): closing it", self.out.qsize())
            self.context.cancel()
            return
        self.out.put(item)


@dataclass
class _Device:
    """The forwarding state of one P4Info: P4Runtime-level entries (as read back) and the
    pipeline model they drive. The live device drives the switch's pipeline; staged and
    scratch devices drive a private Pipeline()."""

    index: P4InfoIndex
    pipeline: pl.Pipeline
    # table name -> canonical key -> TableEntry as stored (canonical bytestrings)
    entries: dict[str, dict[tuple, p4runtime_pb2.TableEntry]] = field(default_factory=dict)
    defaults: dict[str, p4runtime_pb2.TableEntry | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.pipeline.tables:
            self.entries.setdefault(name, {})
            self.defaults.setdefault(name, None)

    # ---------------------------------------------------------------- write
    def apply_update(self, u: p4runtime_pb2.Update) -> None:
        if u.type not in (Update.INSERT, Update.MODIFY, Update.DELETE):
            raise _err(
                grpc.StatusCode.INVALID_ARGUMENT,
                "update type UNSPECIFIED" if u.type == Update.UNSPECIFIED else f"unknown update type {u.type}",
            )
        kind = u.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table(u.type, u.entity.table_entry)
        elif kind == "counter_entry":
            self._write_counter(u.type, u.entity.counter_entry)
        elif kind == "register_entry":
            self._write_register(u.type, u.entity.register_entry)
        else:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"writing {kind} is not supported")

    # -- tables
    def _table(self, table_id: int) -> tuple[str, p4info_pb2.Table]:
        t = self.index.tables.get(table_id)
        if t is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown table id {table_id}")
        name = t.preamble.name
        if name not in self.entries:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {name} is not implemented by this target")
        return name, t

    def _match_key(self, tname: str, t: p4info_pb2.Table, e: p4runtime_pb2.TableEntry) -> tuple:
        fields = {m.id: m for m in t.match_fields}
        seen: dict[str, tuple] = {}
        for fm in e.match:
            mf = fields.get(fm.field_id)
            if mf is None:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: unknown match field id {fm.field_id}")
            if mf.name in seen:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: match field {mf.name} given twice")
            seen[mf.name] = (mf, fm)
        key: list = []
        for mf in t.match_fields:  # one item per field, in P4Info order (TableModel.key)
            kind = mf.match_type
            if kind == MatchType.LPM:
                if mf.name not in seen:
                    key.append((0, 0))  # omitted LPM field = wildcard /0
                    continue
                fm = seen[mf.name][1]
                if fm.WhichOneof("field_match_type") != "lpm":
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{mf.name}: expected an lpm match")
                plen = fm.lpm.prefix_len
                if not 1 <= plen <= mf.bitwidth:
                    raise _err(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{mf.name}: prefix_len {plen} not in 1..{mf.bitwidth} (omit the field for /0)",
                    )
                v = _to_int(fm.lpm.value, mf.bitwidth, mf.name)
                if v & ((1 << (mf.bitwidth - plen)) - 1):
                    raise _err(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{mf.name}: prefix {v:#0{2 + (mf.bitwidth + 3) // 4}x}/{plen} has "
                        "bits set beyond the prefix length",
                    )
                key.append((v, plen))
            elif kind == MatchType.EXACT:
                if mf.name not in seen:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: exact match on {mf.name} is required")
                fm = seen[mf.name][1]
                if fm.WhichOneof("field_match_type") != "exact":
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{mf.name}: expected an exact match")
                key.append((_to_int(fm.exact.value, mf.bitwidth, mf.name),))
            else:
                raise _err(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"table {tname}: {MatchType.Name(kind)} match on {mf.name} is not supported",
                )
        return tuple(x for item in key for x in item)

    def _action(self, tname: str, t: p4info_pb2.Table, e: p4runtime_pb2.TableEntry):
        which = e.action.WhichOneof("type")
        if which is None:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: entry has no action")
        if which != "action":
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {tname}: {which} (action profiles) is not supported")
        act = e.action.action
        a = self.index.actions.get(act.action_id)
        if a is None:
            # P4Runtime 1.4.1 (and BMv2): an id the P4Info lacks is a malformed request
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"unknown action id {act.action_id}")
        aname = a.preamble.name
        if act.action_id not in {r.id for r in t.action_refs}:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {aname} is not an action of table {tname}")
        pdefs = {p.id: p for p in a.params}
        values: dict[str, int] = {}
        for prm in act.params:
            pd = pdefs.get(prm.param_id)
            if pd is None:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {aname}: unknown param id {prm.param_id}")
            if pd.name in values:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {aname}: param {pd.name} given twice")
            values[pd.name] = _to_int(prm.value, pd.bitwidth, f"action {aname} param {pd.name}")
        absent = [p.name for p in a.params if p.name not in values]
        if absent:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {aname}: missing params {absent}")
        try:
            return self.pipeline.tables[tname].value(aname, values)
        except pl.UnsupportedAction as ex:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, str(ex)) from None

    @staticmethod
    def _stored(e: p4runtime_pb2.TableEntry) -> p4runtime_pb2.TableEntry:
        """A copy of ``e`` with canonical bytestrings (what Read returns)."""
        out = p4runtime_pb2.TableEntry()
        out.CopyFrom(e)
        for fm in out.match:
            kind = fm.WhichOneof("field_match_type")
            if kind == "exact":
                fm.exact.value = canonical(fm.exact.value)
            elif kind == "lpm":
                fm.lpm.value = canonical(fm.lpm.value)
        if out.action.HasField("action"):
            for prm in out.action.action.params:
                prm.value = canonical(prm.value)
        return out

    def _write_table(self, utype: int, e: p4runtime_pb2.TableEntry) -> None:
        tname, t = self._table(e.table_id)
        for fld in ("meter_config", "counter_data", "meter_counter_data"):
            if e.HasField(fld):
                raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {tname}: {fld} is not supported")
        if e.is_const:
            raise _err(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"table {tname}: is_const is read-only (const entries come from the P4 "
                "program, a controller cannot write them)",
            )
        if e.idle_timeout_ns:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {tname}: idle timeout is not supported")
        if e.HasField("time_since_last_hit"):
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: time_since_last_hit is read-only")
        if e.priority:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: priority must be 0 (no ternary/range fields)")
        if e.is_default_action:
            if utype != Update.MODIFY:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: the default entry can only be modified")
            if len(e.match):
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: the default entry has no match fields")
            if e.action.WhichOneof("type") is None:  # reset to the P4 program's default
                value = None
                self.defaults[tname] = None
            else:
                value = self._action(tname, t, e)
                self.defaults[tname] = self._stored(e)
            self.pipeline.tables[tname].set_default(value)
            return
        key = self._match_key(tname, t, e)
        store = self.entries[tname]
        if utype == Update.INSERT and key in store:
            raise _err(grpc.StatusCode.ALREADY_EXISTS, f"table {tname}: entry {key} already exists")
        if utype in (Update.MODIFY, Update.DELETE) and key not in store:
            raise _err(grpc.StatusCode.NOT_FOUND, f"table {tname}: no entry {key}")
        if utype == Update.DELETE:
            del store[key]
            self.pipeline.tables[tname].delete(key)
            return
        value = self._action(tname, t, e)
        if utype == Update.INSERT and t.size and len(store) >= t.size:
            raise _err(grpc.StatusCode.RESOURCE_EXHAUSTED, f"table {tname} is full ({t.size} entries)")
        store[key] = self._stored(e)
        self.pipeline.tables[tname].put(key, value)

    # -- counters and registers
    def _counter(self, counter_id: int) -> tuple[str, p4info_pb2.Counter]:
        c = self.index.counters.get(counter_id)
        if c is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown counter id {counter_id}")
        if c.preamble.name not in self.pipeline.counters:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"counter {c.preamble.name} is not implemented by this target")
        return c.preamble.name, c

    def _register(self, register_id: int) -> tuple[str, p4info_pb2.Register]:
        r = self.index.registers.get(register_id)
        if r is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown register id {register_id}")
        if r.preamble.name not in self.pipeline.registers:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"register {r.preamble.name} is not implemented by this target")
        return r.preamble.name, r

    @staticmethod
    def _index(name: str, size: int, ce) -> int:
        i = ce.index.index
        if i < 0:  # int64 on the wire: a negative index is malformed, not out of range
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: negative index {i}")
        if not i < size:
            raise _err(grpc.StatusCode.OUT_OF_RANGE, f"{name}: index {i} not in 0..{size - 1}")
        return i

    def _write_counter(self, utype: int, ce: p4runtime_pb2.CounterEntry) -> None:
        name, _ = self._counter(ce.counter_id)
        if utype != Update.MODIFY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"counter {name}: only MODIFY is allowed")
        arr = self.pipeline.counters[name]
        # no index: the write is for every cell (P4Runtime 1.4.1, 9.5)
        cells = [self._index(name, arr.size, ce)] if ce.HasField("index") else range(arr.size)
        for i in cells:
            arr.set(i, ce.data.packet_count, ce.data.byte_count)

    def _write_register(self, utype: int, re_: p4runtime_pb2.RegisterEntry) -> None:
        name, r = self._register(re_.register_id)
        if utype != Update.MODIFY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"register {name}: only MODIFY is allowed")
        reg = self.pipeline.registers[name]
        cells = [self._index(name, len(reg), re_)] if re_.HasField("index") else range(len(reg))
        if re_.data.WhichOneof("data") != "bitstring":
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"register {name}: data must be a bitstring")
        value = _to_int(re_.data.bitstring, r.type_spec.bitstring.bit.bitwidth, name)
        for i in cells:  # no index: every cell
            reg[i] = value

    # ---------------------------------------------------------------- read
    def read_entity(self, ent: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        kind = ent.WhichOneof("entity")
        if kind == "table_entry":
            return self._read_tables(ent.table_entry)
        if kind == "counter_entry":
            return self._read_counters(ent.counter_entry)
        if kind == "register_entry":
            return self._read_registers(ent.register_entry)
        raise _err(grpc.StatusCode.UNIMPLEMENTED, f"reading {kind} is not supported")

    def _default_entry(self, tname: str) -> p4runtime_pb2.TableEntry:
        e = self.defaults[tname]
        if e is not None:
            return e
        e = p4runtime_pb2.TableEntry(table_id=self.index.id("table", tname), is_default_action=True)
        aname = self.pipeline.tables[tname].default_action
        if f"action:{aname}" in self.index.ids:
            e.action.action.action_id = self.index.id("action", aname)
        return e

    def _read_tables(self, q: p4runtime_pb2.TableEntry) -> list[p4runtime_pb2.Entity]:
        if q.table_id:
            names = [self._table(q.table_id)[0]]
        else:
            names = list(self.entries)
        res = []
        for tname in names:
            if q.is_default_action:
                res.append(p4runtime_pb2.Entity(table_entry=self._default_entry(tname)))
                continue
            store = self.entries[tname]
            if q.table_id and len(q.match):
                key = self._match_key(tname, self._table(q.table_id)[1], q)
                sel = [store[key]] if key in store else []
            else:
                sel = list(store.values())
            res.extend(p4runtime_pb2.Entity(table_entry=e) for e in sel)
        return res

    def _read_counters(self, q: p4runtime_pb2.CounterEntry) -> list[p4runtime_pb2.Entity]:
        if q.counter_id:
            items = [self._counter(q.counter_id)]
        else:
            items = [
                (c.preamble.name, c) for c in self.index.counters.values() if c.preamble.name in self.pipeline.counters
            ]
        res = []
        for name, c in items:
            arr = self.pipeline.counters[name]
            idxs = [self._index(name, arr.size, q)] if q.HasField("index") else range(arr.size)
            unit = c.spec.unit
            pk, by = arr.packets, arr.bytes
            for i in idxs:
                e = p4runtime_pb2.Entity()
                ce = e.counter_entry
                ce.counter_id = c.preamble.id
                ce.index.index = i
                if unit in (Unit.PACKETS, Unit.BOTH):
                    ce.data.packet_count = pk[i]
                if unit in (Unit.BYTES, Unit.BOTH):
                    ce.data.byte_count = by[i]
                res.append(e)
        return res

    def _read_registers(self, q: p4runtime_pb2.RegisterEntry) -> list[p4runtime_pb2.Entity]:
        if q.register_id:
            items = [self._register(q.register_id)]
        else:
            items = [
                (r.preamble.name, r)
                for r in self.index.registers.values()
                if r.preamble.name in self.pipeline.registers
            ]
        res = []
        for name, r in items:
            reg = self.pipeline.registers[name]
            idxs = [self._index(name, len(reg), q)] if q.HasField("index") else range(len(reg))
            for i in idxs:
                e = p4runtime_pb2.Entity()
                e.register_entry.register_id = r.preamble.id
                e.register_entry.index.index = i
                e.register_entry.data.bitstring = canonical(reg[i].to_bytes(8, "big"))
                res.append(e)
        return res

    # ---------------------------------------------------------------- pipeline changes
    def rekeyed(self, new_index: P4InfoIndex) -> "_Device":
        """This device's entries expressed in ``new_index``'s ids, validated on a scratch
        pipeline. Raises INVALID_ARGUMENT (the config given cannot keep the state: P4Runtime
        1.4.1 for RECONCILE_AND_COMMIT) naming the first entry the new P4Info cannot hold;
        changes nothing here."""
        scratch = _Device(new_index, pl.Pipeline())
        for table, entries in self.entries.items():
            for e in list(entries.values()) + [self.defaults[table]]:
                if e is None:
                    continue
                what = f"table {table} {'default entry' if e.is_default_action else 'entry'}"
                try:
                    moved = self._translate(e, new_index, what)
                    scratch._write_table(Update.MODIFY if e.is_default_action else Update.INSERT, moved)
                except P4RTError as ex:
                    raise _err(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"the new P4Info cannot keep the forwarding state: {what}: {ex.message}; nothing was changed",
                    ) from None
        return scratch

    def _translate(self, e: p4runtime_pb2.TableEntry, new: P4InfoIndex, what: str) -> p4runtime_pb2.TableEntry:
        """``e`` with its ids looked up by name in ``new`` (P4RTError if a name is missing)."""

        def missing(kind: str, name: str) -> P4RTError:
            return _err(grpc.StatusCode.NOT_FOUND, f"{kind} {name} is not in the new P4Info")

        out = p4runtime_pb2.TableEntry()
        out.CopyFrom(e)
        old_t = self.index.tables[e.table_id]
        tname = old_t.preamble.name
        if f"table:{tname}" not in new.ids:
            raise missing("table", tname)
        out.table_id = new.id("table", tname)
        new_t = new.tables[out.table_id]
        fid = {m.name: m.id for m in new_t.match_fields}
        oname = {m.id: m.name for m in old_t.match_fields}
        for fm in out.match:
            name = oname[fm.field_id]
            if name not in fid:
                raise missing(f"match field of {tname}:", name)
            fm.field_id = fid[name]
        if out.action.HasField("action"):
            old_a = self.index.actions[e.action.action.action_id]
            aname = old_a.preamble.name
            if f"action:{aname}" not in new.ids:
                raise missing("action", aname)
            out.action.action.action_id = new.id("action", aname)
            new_a = new.actions[out.action.action.action_id]
            pid = {p.name: p.id for p in new_a.params}
            pname = {p.id: p.name for p in old_a.params}
            for prm in out.action.action.params:
                name = pname[prm.param_id]
                if name not in pid:
                    raise missing(f"param of action {aname}:", name)
                prm.param_id = pid[name]
        return out

    def copy_into(self, target: "_Device") -> None:
        """Install this (staged) device's whole state into ``target`` (same P4Info), which
        starts empty. Only called with state already validated by this device."""
        for table, entries in self.entries.items():
            for e in entries.values():
                target._write_table(Update.INSERT, e)
            d = self.defaults[table]
            if d is not None:
                target._write_table(Update.MODIFY, d)
        for name, arr in self.pipeline.counters.items():
            dst = target.pipeline.counters[name]
            for i in range(arr.size):
                if arr.packets[i] or arr.bytes[i]:
                    dst.set(i, arr.packets[i], arr.bytes[i])
        for name, reg in self.pipeline.registers.items():
            target.pipeline.registers[name][:] = reg


class P4RuntimeTarget(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The P4Runtime service of one device. ``pipeline.active`` is False until a config is set."""

    def __init__(
        self,
        pipeline: pl.Pipeline,
        device_id: int = 0,
        max_streams: int = DEFAULT_MAX_STREAMS,
        arbitration_grace_s: float = DEFAULT_ARBITRATION_GRACE_S,
    ) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self.max_streams = max_streams
        self.arbitration_grace_s = arbitration_grace_s
        self.port: int | None = None  # set by serve()
        self.lock = threading.RLock()
        self.config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.dev: _Device | None = None  # the committed state (drives self.pipeline)
        self.saved: p4runtime_pb2.ForwardingPipelineConfig | None = None  # VERIFY_AND_SAVE
        self.staged: _Device | None = None  # writes since the save (private pipeline)
        self.streams: list[_Stream] = []
        self.primary: _Stream | None = None
        self.election_id_past: int | None = None
        pipeline.active = False

    @property
    def index(self) -> P4InfoIndex | None:
        return self.dev.index if self.dev else None

    # ---------------------------------------------------------------- arbitration
    def _status_msg(self, s: _Stream) -> p4runtime_pb2.StreamMessageResponse:
        m = p4runtime_pb2.StreamMessageResponse()
        a = m.arbitration
        a.device_id = self.device_id
        if self.election_id_past is not None:
            a.election_id.high = self.election_id_past >> 64
            a.election_id.low = self.election_id_past & (2**64 - 1)
        if s is self.primary:
            a.status.code = code_pb2.OK
            a.status.message = "primary"
        elif self.primary is not None:
            a.status.code = code_pb2.ALREADY_EXISTS
            a.status.message = "backup (another client is primary)"
        else:
            a.status.code = code_pb2.NOT_FOUND
            a.status.message = (
                f"backup (no primary: re-arbitrate with an election_id >= {self.election_id_past})"
                if self.election_id_past is not None
                else "backup (no election_id given)"
            )
        return m

    def _notify_all(self) -> None:
        for o in self.streams:
            if o.arbitrated:
                o.send(self._status_msg(o))

    def _arbitrate(self, s: _Stream, a: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        if s.arbitrated and a.device_id != self.device_id:  # P4Runtime 1.4.1, 5.3
            raise _err(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this stream is arbitrated for device {self.device_id}; it cannot "
                f"re-arbitrate for device {a.device_id} (open another stream)",
            )
        if a.device_id != self.device_id:
            raise _err(
                grpc.StatusCode.NOT_FOUND, f"unknown device_id {a.device_id} (this target is device {self.device_id})"
            )
        if a.HasField("role") and (a.role.name or a.role.id):
            raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
        eid = _election(a.election_id) if a.HasField("election_id") else None
        with self.lock:
            if eid is not None and any(o is not s and o.election == eid for o in self.streams):
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"election_id {eid} is already used by another client")
            s.arbitrated = True
            s.election = eid
            was_primary = s is self.primary
            if eid is not None and (self.election_id_past is None or eid >= self.election_id_past):
                self.election_id_past = eid
                self.primary = s
                self._notify_all()  # the spec asks for a notification even if nothing changed
            elif was_primary:  # the primary re-arbitrated below its own id: it steps down
                self.primary = None
                self._notify_all()
            else:
                s.send(self._status_msg(s))
        log.info(
            "arbitration: election_id %s, primary %s, election_id_past %s",
            eid,
            self.primary.election if self.primary else None,
            self.election_id_past,
        )

    def _handle_stream_msg(self, s: _Stream, req: p4runtime_pb2.StreamMessageRequest) -> None:
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            self._arbitrate(s, req.arbitration)
            return
        m = p4runtime_pb2.StreamMessageResponse()
        m.error.canonical_code = code_pb2.UNIMPLEMENTED
        if kind == "packet":
            m.error.message = "PacketOut is not supported (mltcp.p4 has no CPU port)"
            m.error.packet_out.packet_out.CopyFrom(req.packet)
        else:
            m.error.message = f"stream message '{kind}' is not supported"
        s.send(m)

    def StreamChannel(self, request_iterator, context):
        s = _Stream(context)
        with self.lock:
            if len(self.streams) >= self.max_streams:
                silent = [
                    o for o in self.streams if not o.arbitrated and s.opened - o.opened >= self.arbitration_grace_s
                ]
                if not silent:
                    log.warning("refusing a StreamChannel: %d streams open (--max-streams)", len(self.streams))
                    context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"too many StreamChannel streams ({self.max_streams} open, all arbitrated)",
                    )
                oldest = min(silent, key=lambda o: o.opened)
                log.warning(
                    "%d streams open: closing one that sent no arbitration for %.1f s",
                    len(self.streams),
                    s.opened - oldest.opened,
                )
                self.streams.remove(oldest)
                oldest.context.cancel()
            self.streams.append(s)
        done = object()

        def reader() -> None:
            try:
                for req in request_iterator:
                    try:
                        self._handle_stream_msg(s, req)
                    except P4RTError as e:
                        s.out.put(e)
                        return
            except grpc.RpcError:
                pass
            except Exception:  # pragma: no cover - logged, stream closed
                log.exception("stream reader failed")
            finally:
                s.out.put(done)

        context.add_callback(lambda: s.out.put(done))
        try:
            threading.Thread(target=reader, name="p4rt-stream", daemon=True).start()
            while True:
                item = s.out.get()
                if item is done:
                    return
                if isinstance(item, P4RTError):
                    context.abort(item.code, item.message)
                yield item
        finally:
            with self.lock:
                if s in self.streams:
                    self.streams.remove(s)
                if s is self.primary:  # nobody is promoted: the backups are told, stay backups
                    self.primary = None
                    log.info(
                        "primary (election_id %s) disconnected; no primary until a client "
                        "re-arbitrates with election_id >= %s",
                        s.election,
                        self.election_id_past,
                    )
                    self._notify_all()

    # ---------------------------------------------------------------- checks
    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise _err(
                grpc.StatusCode.NOT_FOUND, f"unknown device_id {device_id} (this target is device {self.device_id})"
            )

    def _check_primary(self, request, role: str = "") -> None:
        if role:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
        if not request.HasField("election_id"):
            raise _err(grpc.StatusCode.PERMISSION_DENIED, "request has no election_id")
        eid = _election(request.election_id)
        if self.primary is None:
            raise _err(
                grpc.StatusCode.PERMISSION_DENIED,
                f"election_id {eid}: there is no primary client; open a StreamChannel "
                "and send a MasterArbitrationUpdate with election_id >= "
                f"{self.election_id_past or 0} first",
            )
        if eid != self.primary.election:
            raise _err(
                grpc.StatusCode.PERMISSION_DENIED, f"election_id {eid} is not the primary's ({self.primary.election})"
            )

    @staticmethod
    def _abort(context, e: P4RTError):
        log.info("%s: %s", e.code.name, e.message)
        context.abort(e.code, e.message)

    def _current(self) -> _Device:
        """The device reads and writes refer to: the staged one after VERIFY_AND_SAVE."""
        dev = self.staged or self.dev
        if dev is None:
            raise _err(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        return dev

    # ---------------------------------------------------------------- pipeline config
    def SetForwardingPipelineConfig(self, request, context):
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_primary(request, request.role)
                self._set_config(request)
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
        except P4RTError as e:
            self._abort(context, e)

    def _set_config(self, request) -> None:
        act = request.action
        if act == SetAction.UNSPECIFIED:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "action is UNSPECIFIED")
        if act not in (
            SetAction.VERIFY,
            SetAction.VERIFY_AND_SAVE,
            SetAction.VERIFY_AND_COMMIT,
            SetAction.COMMIT,
            SetAction.RECONCILE_AND_COMMIT,
        ):
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"unknown action {act}")
        if act == SetAction.COMMIT:
            if request.HasField("config"):
                raise _err(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "COMMIT carries no config: it realizes the one saved by VERIFY_AND_SAVE",
                )
            if self.saved is None:
                raise _err(grpc.StatusCode.NOT_FOUND, "COMMIT without a config saved by VERIFY_AND_SAVE")
            live = _Device(self.staged.index, self.pipeline)
            self.pipeline.reset_state()
            self.staged.copy_into(live)  # the writes made since the save
            self._install(self.saved, live, "committed (saved config)")
            return
        if not request.HasField("config") or not request.config.HasField("p4info"):
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "request carries no config.p4info")
        missing = missing_objects(request.config.p4info)
        if missing:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "P4Info is not mltcp.p4: missing " + "; ".join(missing))
        cfg = p4runtime_pb2.ForwardingPipelineConfig()
        cfg.CopyFrom(request.config)
        new_index = P4InfoIndex.build(cfg.p4info)
        if act == SetAction.VERIFY:
            return
        if act == SetAction.VERIFY_AND_SAVE:
            # COMMIT replays the writes since the save onto the forwarding state at the save:
            # the staged device starts as that state re-keyed by name into the saved P4Info
            # (as RECONCILE_AND_COMMIT would keep it), or empty if the saved P4Info cannot
            # hold it (as VERIFY_AND_COMMIT would clear it). Reads show the staged state.
            self.saved = cfg
            base = self.staged or self.dev
            try:
                self.staged = base.rekeyed(new_index) if base is not None else None
                kept = "kept"
            except P4RTError as e:
                self.staged, kept = None, f"cleared ({e.message})"
            if self.staged is None:
                self.staged = _Device(new_index, pl.Pipeline())
            log.info(
                "pipeline config saved; reads and writes now refer to it until COMMIT; "
                "the forwarding state at the save is %s",
                kept,
            )
            return
        if act == SetAction.RECONCILE_AND_COMMIT and self.dev is not None:
            scratch = self.dev.rekeyed(new_index)  # raises before anything changes
            live = _Device(new_index, self.pipeline, scratch.entries, scratch.defaults)
            self._install(cfg, live, "reconciled")
            return
        self.pipeline.reset_state()
        self._install(cfg, _Device(new_index, self.pipeline), "committed")

    def _install(self, cfg, dev: _Device, how: str) -> None:
        self.config = cfg
        self.dev = dev
        self.saved = None
        self.staged = None
        self.pipeline.active = True
        log.info(
            "pipeline config %s (%d tables, %d counters, %d registers, device config %d bytes)",
            how,
            len(cfg.p4info.tables),
            len(cfg.p4info.counters),
            len(cfg.p4info.registers),
            len(cfg.p4_device_config),
        )

    def GetForwardingPipelineConfig(self, request, context):
        try:
            self._check_device(request.device_id)
            with self.lock:
                config = self.saved or self.config
                if config is None:
                    raise _err(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
                rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
                rt = request.response_type
                if config.HasField("cookie"):
                    rep.config.cookie.CopyFrom(config.cookie)
                if rt in (GetType.ALL, GetType.P4INFO_AND_COOKIE):
                    rep.config.p4info.CopyFrom(config.p4info)
                if rt in (GetType.ALL, GetType.DEVICE_CONFIG_AND_COOKIE):
                    rep.config.p4_device_config = config.p4_device_config
                return rep
        except P4RTError as e:
            self._abort(context, e)

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api_version())

    # ---------------------------------------------------------------- write
    def Write(self, request, context):
        errors: list[P4RTError | None] = []
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_primary(request, request.role)
                dev = self._current()
                if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                    raise _err(grpc.StatusCode.UNIMPLEMENTED, "only atomicity CONTINUE_ON_ERROR is supported")
                for u in request.updates:
                    try:
                        dev.apply_update(u)
                        errors.append(None)
                    except P4RTError as e:
                        log.info("write update failed: %s: %s", e.code.name, e.message)
                        errors.append(e)
        except P4RTError as e:
            self._abort(context, e)
        if any(errors):
            st = status_pb2.Status(
                code=code_pb2.UNKNOWN, message=f"{sum(e is not None for e in errors)} of {len(errors)} updates failed"
            )
            for e in errors:
                perr = p4runtime_pb2.Error()
                if e is None:
                    perr.canonical_code = code_pb2.OK
                else:
                    perr.canonical_code = _GRPC_TO_CODE[e.code]
                    perr.message = e.message
                any_msg = any_pb2.Any()
                any_msg.Pack(perr)
                st.details.append(any_msg)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, st.message)
        return p4runtime_pb2.WriteResponse()

    # ---------------------------------------------------------------- read
    def Read(self, request, context):
        try:
            self._check_device(request.device_id)
            if request.role:
                raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
            with self.lock:
                dev = self._current()
                out: list[p4runtime_pb2.Entity] = []
                for ent in request.entities:
                    out.extend(dev.read_entity(ent))
        except P4RTError as e:
            self._abort(context, e)
            return
        for i in range(0, len(out), 512):
            rep = p4runtime_pb2.ReadResponse()
            rep.entities.extend(out[i : i + 512])
            yield rep
        if not out:
            yield p4runtime_pb2.ReadResponse()


@dataclass(frozen=True)
class TlsConfig:
    """Server credentials: PEM bytes of the certificate chain and key; with ``client_ca``,
    clients must present a certificate signed by it (mutual TLS)."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.client_ca, require_client_auth=self.client_ca is not None
        )


def serve(
    target: P4RuntimeTarget,
    address: str = "127.0.0.1:9559",
    unary_workers: int = DEFAULT_UNARY_WORKERS,
    tls: TlsConfig | None = None,
) -> grpc.Server:
    """Start a gRPC server for ``target`` on ``address``; returns the started server.

    The pool has one thread per allowed stream (``target.max_streams``) plus ``unary_workers``
    for the unary RPCs; ``tls`` switches the port to TLS (see :class:`TlsConfig`)."""
    workers = target.max_streams + unary_workers
    # no SO_REUSEPORT: a second switch on a used port must fail, not share connections
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt"),
        options=[("grpc.so_reuseport", 0)],
        maximum_concurrent_rpcs=4 * workers,
    )
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(target, server)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.credentials())
    except RuntimeError as e:  # grpcio >= 1.5x raises instead of returning 0
        raise OSError(f"cannot listen for P4Runtime on {address}: {e}") from None
    if port == 0:
        raise OSError(f"cannot listen for P4Runtime on {address}")
    server.start()
    target.port = port  # the bound port (what port 0 became)
    log.info(
        "P4Runtime server on %s (port %d, device %d, %s, at most %d streams)",
        address,
        port,
        target.device_id,
        "TLS" + (" with client certificates" if tls and tls.client_ca else "") if tls else "plaintext",
        target.max_streams,
    )
    return server
