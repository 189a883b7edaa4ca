"""P4Runtime server (grpcio, p4runtime 1.4 protos) in front of the pipeline model.

Object ids come from the P4Info the controller pushes (looked up by name); the model itself only
knows names. Anything the target cannot honour gets a gRPC status, never silence: the Write RPC
reports per-update errors the P4Runtime way (status UNKNOWN with one ``p4.v1.Error`` per update
in ``grpc-status-details-bin``), the other RPCs use the canonical code directly.
"""

from __future__ import annotations

import importlib.metadata
import logging
import queue
import threading
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from . import pipeline as pl
from .p4info import P4InfoIndex, missing_objects

log = logging.getLogger("mltcp.switch.p4rt")

SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest
Update = p4runtime_pb2.Update
Unit = p4info_pb2.CounterSpec.Unit

_GRPC_TO_CODE = {s: s.value[0] for s in grpc.StatusCode}


class P4RTError(Exception):
    """An error with a canonical gRPC code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _err(code: grpc.StatusCode, message: str) -> P4RTError:
    return P4RTError(code, message)


def _to_int(value: bytes, bitwidth: int, what: str) -> int:
    v = int.from_bytes(value, "big")
    if not value:
        raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty bytestring")
    if len(value) > (bitwidth + 7) // 8:
        raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                   f"{what}: {len(value)}-byte string for a bit<{bitwidth}> field")
    if v >> bitwidth:
        raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                   f"{what}: value {v:#x} does not fit in bit<{bitwidth}>")
    return v


def _election(e: p4runtime_pb2.Uint128) -> int:
    return (e.high << 64) | e.low


def api_version() -> str:
    try:
        return importlib.metadata.version("p4runtime")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "1.4.1"


class _Stream:
    """One StreamChannel: its outgoing queue and its election id (None before arbitration)."""

    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.election: int | None = None


class P4RuntimeTarget(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The P4Runtime service of one device. ``pipeline.active`` is False until a config is set."""

    def __init__(self, pipeline: pl.Pipeline, device_id: int = 0) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self.lock = threading.RLock()
        self.config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.saved: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.index: P4InfoIndex | None = None
        # table name -> canonical key -> TableEntry as written (for Read)
        self.entries: dict[str, dict[tuple, p4runtime_pb2.TableEntry]] = {
            pl.T_IPV4_LPM: {}, pl.T_ECN_THRESHOLD: {}}
        self.defaults: dict[str, p4runtime_pb2.TableEntry | None] = {
            pl.T_IPV4_LPM: None, pl.T_ECN_THRESHOLD: None}
        self.streams: list[_Stream] = []
        self.primary: int | None = None
        pipeline.active = False

    # ---------------------------------------------------------------- arbitration
    def _recompute_primary(self) -> None:
        ids = [s.election for s in self.streams if s.election is not None]
        new = max(ids) if ids else None
        if new != self.primary:
            self.primary = new
            for s in self.streams:
                if s.election is not None:
                    s.out.put(self._arbitration_msg(s))

    def _arbitration_msg(self, s: _Stream) -> p4runtime_pb2.StreamMessageResponse:
        m = p4runtime_pb2.StreamMessageResponse()
        a = m.arbitration
        a.device_id = self.device_id
        if self.primary is not None:
            a.election_id.high = self.primary >> 64
            a.election_id.low = self.primary & (2**64 - 1)
        if s.election is not None and s.election == self.primary:
            a.status.code = code_pb2.OK
            a.status.message = "primary"
        else:
            a.status.code = code_pb2.ALREADY_EXISTS if self.primary is not None else code_pb2.NOT_FOUND
            a.status.message = "backup"
        return m

    def _handle_stream_msg(self, s: _Stream, req: p4runtime_pb2.StreamMessageRequest) -> None:
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            a = req.arbitration
            if a.device_id != self.device_id:
                raise _err(grpc.StatusCode.NOT_FOUND, f"unknown device_id {a.device_id} "
                           f"(this target is device {self.device_id})")
            if a.HasField("role") and (a.role.name or a.role.id):
                raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
            eid = _election(a.election_id)
            with self.lock:
                if any(o is not s and o.election == eid for o in self.streams):
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                               f"election_id {eid} is already used by another client")
                s.election = eid
                old = self.primary
                self._recompute_primary()
                if self.primary == old:  # nobody else was notified; answer this client
                    s.out.put(self._arbitration_msg(s))
            log.info("arbitration: election_id %d, primary %s", eid, self.primary)
            return
        m = p4runtime_pb2.StreamMessageResponse()
        m.error.canonical_code = code_pb2.UNIMPLEMENTED
        if kind == "packet":
            m.error.message = "PacketOut is not supported (mltcp.p4 has no CPU port)"
            m.error.packet_out.packet_out.CopyFrom(req.packet)
        else:
            m.error.message = f"stream message '{kind}' is not supported"
        s.out.put(m)

    def StreamChannel(self, request_iterator, context):
        s = _Stream()
        with self.lock:
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
        threading.Thread(target=reader, name="p4rt-stream", daemon=True).start()
        try:
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
                self._recompute_primary()

    # ---------------------------------------------------------------- checks
    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise _err(grpc.StatusCode.NOT_FOUND,
                       f"unknown device_id {device_id} (this target is device {self.device_id})")

    def _check_primary(self, election_id: p4runtime_pb2.Uint128, role: str = "") -> None:
        if role:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
        eid = _election(election_id)
        if self.primary is None or eid != self.primary:
            raise _err(grpc.StatusCode.PERMISSION_DENIED,
                       f"election_id {eid} is not the primary ({self.primary}); open a "
                       "StreamChannel and send MasterArbitrationUpdate first")

    @staticmethod
    def _abort(context, e: P4RTError):
        log.info("%s: %s", e.code.name, e.message)
        context.abort(e.code, e.message)

    # ---------------------------------------------------------------- pipeline config
    def SetForwardingPipelineConfig(self, request, context):
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_primary(request.election_id, request.role)
                act = request.action
                if act == SetAction.UNSPECIFIED:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, "action is UNSPECIFIED")
                if act == SetAction.COMMIT:
                    if self.saved is None:
                        raise _err(grpc.StatusCode.FAILED_PRECONDITION,
                                   "COMMIT without a config saved by VERIFY_AND_SAVE")
                    self._activate(self.saved, reconcile=False)
                    self.saved = None
                    return p4runtime_pb2.SetForwardingPipelineConfigResponse()
                if not request.HasField("config") or not request.config.HasField("p4info"):
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, "request carries no config.p4info")
                missing = missing_objects(request.config.p4info)
                if missing:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                               "P4Info is not mltcp.p4: missing " + "; ".join(missing))
                if act == SetAction.VERIFY_AND_SAVE:
                    self.saved = p4runtime_pb2.ForwardingPipelineConfig()
                    self.saved.CopyFrom(request.config)
                elif act in (SetAction.VERIFY_AND_COMMIT, SetAction.RECONCILE_AND_COMMIT):
                    self._activate(request.config, reconcile=act == SetAction.RECONCILE_AND_COMMIT)
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
        except P4RTError as e:
            self._abort(context, e)

    def _activate(self, config, reconcile: bool) -> None:
        cfg = p4runtime_pb2.ForwardingPipelineConfig()
        cfg.CopyFrom(config)
        new_index = P4InfoIndex.build(cfg.p4info)
        if reconcile and self.index is not None:
            # Forwarding state is kept by name: re-key stored entries to the new ids.
            for table, entries in self.entries.items():
                for e in list(entries.values()) + [self.defaults[table]]:
                    if e is None:
                        continue
                    old_t = self.index.tables[e.table_id]
                    e.table_id = new_index.id("table", table)
                    new_t = new_index.tables[e.table_id]
                    fid = {m.name: m.id for m in new_t.match_fields}
                    oname = {m.id: m.name for m in old_t.match_fields}
                    for fm in e.match:
                        fm.field_id = fid[oname[fm.field_id]]
                    if e.action.HasField("action"):
                        old_a = self.index.actions[e.action.action.action_id]
                        e.action.action.action_id = new_index.id("action", old_a.preamble.name)
                        new_a = new_index.actions[e.action.action.action_id]
                        pid = {p.name: p.id for p in new_a.params}
                        pname = {p.id: p.name for p in old_a.params}
                        for prm in e.action.action.params:
                            prm.param_id = pid[pname[prm.param_id]]
        else:
            self.pipeline.reset_state()
            for t in self.entries.values():
                t.clear()
            for t in self.defaults:
                self.defaults[t] = None
        self.config = cfg
        self.index = new_index
        self.pipeline.active = True
        log.info("pipeline config %s (%d tables, %d counters, %d registers, device config %d bytes)",
                 "reconciled" if reconcile else "committed", len(cfg.p4info.tables),
                 len(cfg.p4info.counters), len(cfg.p4info.registers), len(cfg.p4_device_config))

    def GetForwardingPipelineConfig(self, request, context):
        try:
            self._check_device(request.device_id)
            with self.lock:
                if self.config is None:
                    raise _err(grpc.StatusCode.FAILED_PRECONDITION,
                               "no forwarding pipeline config has been set")
                rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
                rt = request.response_type
                if self.config.HasField("cookie"):
                    rep.config.cookie.CopyFrom(self.config.cookie)
                if rt in (GetType.ALL, GetType.P4INFO_AND_COOKIE):
                    rep.config.p4info.CopyFrom(self.config.p4info)
                if rt in (GetType.ALL, GetType.DEVICE_CONFIG_AND_COOKIE):
                    rep.config.p4_device_config = self.config.p4_device_config
                return rep
        except P4RTError as e:
            self._abort(context, e)

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api_version())

    # ---------------------------------------------------------------- write
    def Write(self, request, context):
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_primary(request.election_id, request.role)
                if self.index is None:
                    raise _err(grpc.StatusCode.FAILED_PRECONDITION,
                               "no forwarding pipeline config has been set")
                if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                    raise _err(grpc.StatusCode.UNIMPLEMENTED,
                               "only atomicity CONTINUE_ON_ERROR is supported")
                errors: list[P4RTError | None] = []
                for u in request.updates:
                    try:
                        self._apply_update(u)
                        errors.append(None)
                    except P4RTError as e:
                        log.info("write update failed: %s: %s", e.code.name, e.message)
                        errors.append(e)
        except P4RTError as e:
            self._abort(context, e)
        if any(errors):
            st = status_pb2.Status(code=code_pb2.UNKNOWN,
                                   message=f"{sum(e is not None for e in errors)} of "
                                           f"{len(errors)} updates failed")
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

    def _apply_update(self, u: p4runtime_pb2.Update) -> None:
        if u.type == Update.UNSPECIFIED:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "update type UNSPECIFIED")
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
        seen: dict[str, p4runtime_pb2.FieldMatch] = {}
        for fm in e.match:
            mf = fields.get(fm.field_id)
            if mf is None:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {tname}: unknown match field id {fm.field_id}")
            if mf.name in seen:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {tname}: match field {mf.name} given twice")
            seen[mf.name] = (mf, fm)
        if tname == pl.T_IPV4_LPM:
            if pl.K_IPV4_DST not in seen:
                return (0, 0)  # omitted LPM field = wildcard /0
            mf, fm = seen[pl.K_IPV4_DST]
            if fm.WhichOneof("field_match_type") != "lpm":
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{mf.name}: expected an lpm match")
            plen = fm.lpm.prefix_len
            if not 1 <= plen <= 32:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{mf.name}: prefix_len {plen} not in 1..32 (omit the field for /0)")
            v = _to_int(fm.lpm.value, 32, mf.name)
            try:
                return self.pipeline.lpm.key(v, plen)
            except ValueError as ex:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{mf.name}: {ex}") from None
        # ecn_threshold
        if pl.K_EGRESS_PORT not in seen:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                       f"table {tname}: exact match on {pl.K_EGRESS_PORT} is required")
        mf, fm = seen[pl.K_EGRESS_PORT]
        if fm.WhichOneof("field_match_type") != "exact":
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{mf.name}: expected an exact match")
        return (_to_int(fm.exact.value, mf.bitwidth, mf.name),)

    def _action(self, tname: str, t: p4info_pb2.Table, e: p4runtime_pb2.TableEntry):
        which = e.action.WhichOneof("type")
        if which is None:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {tname}: entry has no action")
        if which != "action":
            raise _err(grpc.StatusCode.UNIMPLEMENTED,
                       f"table {tname}: {which} (action profiles) is not supported")
        act = e.action.action
        a = self.index.actions.get(act.action_id)
        if a is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown action id {act.action_id}")
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
        if tname == pl.T_IPV4_LPM:
            if aname == pl.A_IPV4_FORWARD:
                return pl.Forward(values["dstAddr"].to_bytes(6, "big"), values["port"])
            if aname == pl.A_DROP:
                return None
            if aname == pl.A_NOACTION:
                return pl.Forward(None, 0)  # v1model: egress_spec stays 0, no rewrite
        else:
            if aname == pl.A_SET_ECN_THRESHOLD:
                return values["threshold"]
            if aname == pl.A_NOACTION:
                return None
        raise _err(grpc.StatusCode.UNIMPLEMENTED, f"action {aname} is not implemented by this target")

    def _write_table(self, utype: int, e: p4runtime_pb2.TableEntry) -> None:
        tname, t = self._table(e.table_id)
        for fld in ("meter_config", "counter_data", "meter_counter_data"):
            if e.HasField(fld):
                raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {tname}: {fld} is not supported")
        if e.idle_timeout_ns:
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"table {tname}: idle timeout is not supported")
        if e.priority:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                       f"table {tname}: priority must be 0 (no ternary/range fields)")
        if e.is_default_action:
            if utype != Update.MODIFY:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {tname}: the default entry can only be modified")
            if len(e.match):
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {tname}: the default entry has no match fields")
            if e.action.WhichOneof("type") is None:  # reset to the P4 program's default
                value = None
                self.defaults[tname] = None
            else:
                value = self._action(tname, t, e)
                stored = p4runtime_pb2.TableEntry()
                stored.CopyFrom(e)
                self.defaults[tname] = stored
            if tname == pl.T_IPV4_LPM:
                self.pipeline.lpm.default = value
            else:
                self.pipeline.ecn_default = value
            return
        key = self._match_key(tname, t, e)
        store = self.entries[tname]
        if utype == Update.INSERT and key in store:
            raise _err(grpc.StatusCode.ALREADY_EXISTS, f"table {tname}: entry {key} already exists")
        if utype in (Update.MODIFY, Update.DELETE) and key not in store:
            raise _err(grpc.StatusCode.NOT_FOUND, f"table {tname}: no entry {key}")
        if utype == Update.DELETE:
            del store[key]
            if tname == pl.T_IPV4_LPM:
                self.pipeline.lpm.remove(*key)
            else:
                self.pipeline.ecn_thresholds.pop(key[0], None)
            return
        value = self._action(tname, t, e)
        stored = p4runtime_pb2.TableEntry()
        stored.CopyFrom(e)
        store[key] = stored
        if tname == pl.T_IPV4_LPM:
            self.pipeline.lpm.set(key[0], key[1], value)
        else:
            self.pipeline.ecn_thresholds[key[0]] = value

    # -- counters and registers
    def _counter(self, counter_id: int) -> tuple[str, p4info_pb2.Counter]:
        c = self.index.counters.get(counter_id)
        if c is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown counter id {counter_id}")
        if c.preamble.name not in self.pipeline.counters:
            raise _err(grpc.StatusCode.UNIMPLEMENTED,
                       f"counter {c.preamble.name} is not implemented by this target")
        return c.preamble.name, c

    def _register(self, register_id: int) -> tuple[str, p4info_pb2.Register]:
        r = self.index.registers.get(register_id)
        if r is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown register id {register_id}")
        if r.preamble.name not in self.pipeline.registers:
            raise _err(grpc.StatusCode.UNIMPLEMENTED,
                       f"register {r.preamble.name} is not implemented by this target")
        return r.preamble.name, r

    @staticmethod
    def _index(name: str, size: int, ce) -> int:
        i = ce.index.index
        if not 0 <= i < size:
            raise _err(grpc.StatusCode.OUT_OF_RANGE, f"{name}: index {i} not in 0..{size - 1}")
        return i

    def _write_counter(self, utype: int, ce: p4runtime_pb2.CounterEntry) -> None:
        name, _ = self._counter(ce.counter_id)
        if utype != Update.MODIFY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"counter {name}: only MODIFY is allowed")
        arr = self.pipeline.counters[name]
        if not ce.HasField("index"):
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"counter {name}: wildcard writes are not supported")
        arr.set(self._index(name, arr.size, ce), ce.data.packet_count, ce.data.byte_count)

    def _write_register(self, utype: int, re_: p4runtime_pb2.RegisterEntry) -> None:
        name, _ = self._register(re_.register_id)
        if utype != Update.MODIFY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"register {name}: only MODIFY is allowed")
        reg = self.pipeline.registers[name]
        if not re_.HasField("index"):
            raise _err(grpc.StatusCode.UNIMPLEMENTED, f"register {name}: wildcard writes are not supported")
        i = self._index(name, len(reg), re_)
        if re_.data.WhichOneof("data") != "bitstring":
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"register {name}: data must be a bitstring")
        reg[i] = _to_int(re_.data.bitstring, pl.REGISTER_BITWIDTHS[name], name)

    # ---------------------------------------------------------------- read
    def Read(self, request, context):
        try:
            self._check_device(request.device_id)
            if request.role:
                raise _err(grpc.StatusCode.UNIMPLEMENTED, "roles are not supported (default role only)")
            with self.lock:
                if self.index is None:
                    raise _err(grpc.StatusCode.FAILED_PRECONDITION,
                               "no forwarding pipeline config has been set")
                out: list[p4runtime_pb2.Entity] = []
                for ent in request.entities:
                    out.extend(self._read_entity(ent))
        except P4RTError as e:
            self._abort(context, e)
            return
        for i in range(0, len(out), 512):
            rep = p4runtime_pb2.ReadResponse()
            rep.entities.extend(out[i:i + 512])
            yield rep
        if not out:
            yield p4runtime_pb2.ReadResponse()

    def _read_entity(self, ent: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
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
        aname = pl.A_DROP if tname == pl.T_IPV4_LPM else pl.A_NOACTION
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
            items = [(c.preamble.name, c) for c in self.index.counters.values()
                     if c.preamble.name in self.pipeline.counters]
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
            items = [(r.preamble.name, r) for r in self.index.registers.values()
                     if r.preamble.name in self.pipeline.registers]
        res = []
        for name, r in items:
            reg = self.pipeline.registers[name]
            idxs = [self._index(name, len(reg), q)] if q.HasField("index") else range(len(reg))
            nbytes = (pl.REGISTER_BITWIDTHS[name] + 7) // 8
            for i in idxs:
                e = p4runtime_pb2.Entity()
                e.register_entry.register_id = r.preamble.id
                e.register_entry.index.index = i
                e.register_entry.data.bitstring = reg[i].to_bytes(nbytes, "big")
                res.append(e)
        return res


def serve(target: P4RuntimeTarget, address: str = "0.0.0.0:9559", workers: int = 16) -> grpc.Server:
    """Start a gRPC server for ``target`` on ``address``; returns the started server."""
    # no SO_REUSEPORT: a second switch on a used port must fail, not share connections
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt"),
                         options=[("grpc.so_reuseport", 0)])
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(target, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as e:  # grpcio >= 1.5x raises instead of returning 0
        raise OSError(f"cannot listen for P4Runtime on {address}: {e}") from None
    if port == 0:
        raise OSError(f"cannot listen for P4Runtime on {address}")
    server.start()
    log.info("P4Runtime server on %s (device %d)", address, target.device_id)
    return server
