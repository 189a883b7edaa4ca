"""P4Runtime control plane for mltcp.p4 on BMv2, Tofino (via its P4Runtime server) or the
project's software switch, built on p4runtime-shell.

Usage::

    from mltcp.controlplane.client import connect
    from mltcp.controlplane.topology import Route

    with connect("127.0.0.1:9559", device_id=0) as sw:        # waits for the server
        sw.push_pipeline()                  # packaged P4Info; config_path=BMv2 JSON for BMv2
        sw.install_routes([Route("10.0.0.2/32", 2, "00:00:00:00:00:02")])
        sw.set_ecn_threshold(port=2, threshold=20)
        snap = sw.read_counters()           # CounterSnapshot: per-job tx/bytes/marks/ratio
        print(snap.jobs[1].tx_packets, snap.parse_errors)

    install_topology(load_topology("controlplane/topologies/dumbbell.toml"), push=True)

Every operation survives a target restart: if the server is UNAVAILABLE, or the arbitration
stream died, the connection is re-opened with exponential backoff (up to ``retry_timeout``
seconds), the pipeline re-pushed if this connection pushed one, and the operation repeated
(table writes are insert-or-modify, so repeating them is safe).

p4runtime-shell keeps one client in a module global, so one SwitchConnection is open per
process at a time; :func:`install_topology` handles switches one after another.

Where raw P4Runtime messages are used instead of p4runtime-shell objects: reading registers
(p4runtime-shell 0.0.6 has no RegisterEntry; the read goes through the shell's client with a
p4runtime_pb2.Entity); iterating counter read results (the request is the shell's
CounterEntry message, but wrapping each of the 1024 returned entities in a shell object
doubled the read time against the software switch: 153 ms vs 78 ms per 1024 entries);
and pushing/reading the pipeline (the shell's ``setup()`` calls
``sys.exit`` on failure, so its client's ``set_fwd_pipe_config`` / ``get_p4info`` are called
directly).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import grpc
import p4runtime_sh.shell as sh
from google.rpc import code_pb2
from p4runtime_sh.p4runtime import (
    P4RuntimeClient,
    P4RuntimeException,
    P4RuntimeWriteException,
)

from mltcp.p4src import P4INFO_PATH

from . import entries as E
from .counters import CounterSnapshot
from .topology import EcnThreshold, Route, SwitchSpec, Topology, check_port, check_threshold

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_GRPC = "127.0.0.1:9559"
DEFAULT_ELECTION_ID = (1, 0)


class ControlPlaneError(RuntimeError):
    """A P4Runtime operation failed (message says which switch and what)."""


def reader_election_id() -> tuple[int, int]:
    """An election id for read-only clients: below any writer's (1, x) and unique per process,
    so a `watch` never takes mastership from, or collides with, an installing client."""
    return (0, (os.getpid() & 0xFFFFFFFF) or 1)


def grpc_code(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code inside a p4runtime-shell or grpc exception, if any."""
    if isinstance(exc, P4RuntimeException):
        return exc.grpc_error.code()
    if isinstance(exc, P4RuntimeWriteException):
        return grpc.StatusCode.UNKNOWN
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return exc.code()
    return None


def _write_codes(exc: P4RuntimeWriteException) -> set[int]:
    return {err.canonical_code for _, err in exc.errors}


class Backoff:
    """Exponential backoff: 0.25 s, 0.5 s, ... capped at `cap`, never past `deadline`."""

    def __init__(self, deadline: float, first: float = 0.25, cap: float = 4.0):
        self.deadline, self.delay, self.cap = deadline, first, cap

    def sleep(self) -> bool:
        """Sleep the next delay; False (without sleeping) once the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 2, self.cap)
        return True


class SwitchConnection:
    """One P4Runtime session to one device. Create with :func:`connect`."""

    def __init__(self, grpc_addr: str = DEFAULT_GRPC, device_id: int = 0,
                 election_id: tuple[int, int] = DEFAULT_ELECTION_ID, name: str | None = None,
                 retry_timeout: float = 30.0):
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = tuple(election_id)
        self.name = name or grpc_addr
        self.retry_timeout = retry_timeout
        self.client: P4RuntimeClient | None = None
        self._pipeline: tuple[Path, Path | None] | None = None  # pushed by us: re-push on restart
        self._stale = False  # reconnected; pipeline/P4Info not yet restored
        self.reconnects = 0

    # --- session ------------------------------------------------------------------------

    def open(self, timeout: float = 10.0) -> "SwitchConnection":
        """Wait (up to `timeout` s) for the server and do the arbitration handshake."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(deadline)
        last = "no answer"
        while True:
            probe = grpc.insecure_channel(self.grpc_addr)
            try:
                grpc.channel_ready_future(probe).result(
                    timeout=max(0.05, deadline - time.monotonic()))
                ready = True
            except grpc.FutureTimeoutError:
                ready, last = False, "server not reachable"
            finally:
                probe.close()
            if ready:
                out = io.StringIO()
                try:
                    # p4runtime-shell calls sys.exit() when the handshake fails, and prints
                    # to stdout when it is not the primary client (keep --json output clean)
                    with contextlib.redirect_stdout(out):
                        self.client = P4RuntimeClient(self.device_id, self.grpc_addr,
                                                      self.election_id)
                    if out.getvalue():
                        log.info("%s: %s", self.name, out.getvalue().strip())
                    sh.client = self.client
                    return self
                except SystemExit:
                    last = "arbitration handshake failed (device id or election id rejected?)"
            if not backoff.sleep():
                raise ControlPlaneError(f"{self.name} ({self.grpc_addr}, device "
                                        f"{self.device_id}): {last} after {timeout:g} s")

    def close(self) -> None:
        """End the session (idempotent)."""
        client, self.client = self.client, None
        if client is None:
            return
        if sh.client is client:
            sh.client = None
        try:
            client.tear_down()
        except Exception as e:  # a dead channel may complain; the session is gone either way
            log.debug("tear_down: %s", e)

    def __enter__(self) -> "SwitchConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stream_alive(self) -> bool:
        c = self.client
        return c is not None and c.stream_recv_thread.is_alive()

    def _restore(self) -> None:
        """After a reconnect: re-push our pipeline, or re-read the device's P4Info."""
        if self._pipeline is not None:
            self._push(*self._pipeline)
        else:
            self._attach()
        self._stale = False

    def call(self, fn: Callable[[], T], what: str = "operation") -> T:
        """Run `fn` (which uses p4runtime-shell), reconnecting and repeating it while the
        target is unavailable, for up to `retry_timeout` seconds.

        After a reconnect the pipeline is re-pushed if this connection pushed one; otherwise
        the P4Info is re-read from the device, waiting (same time limit) while the restarted
        device has no pipeline yet (someone else is expected to push it)."""
        deadline: float | None = None
        backoff: Backoff | None = None
        while True:
            try:
                if not self.stream_alive:
                    raise ConnectionResetError("arbitration stream closed")
                sh.client = self.client
                if self._stale:
                    self._restore()
                return fn()
            except (P4RuntimeException, P4RuntimeWriteException, grpc.RpcError,
                    ConnectionResetError) as e:
                code = grpc_code(e)
                lost = (isinstance(e, ConnectionResetError) or not self.stream_alive
                        or code == grpc.StatusCode.UNAVAILABLE)
                waiting = self._stale and code == grpc.StatusCode.FAILED_PRECONDITION
                if not (lost or waiting):
                    raise self._error(what, e) from e
                if deadline is None:
                    deadline = time.monotonic() + self.retry_timeout
                    backoff = Backoff(deadline)
                reopened = False
                if lost:
                    log.warning("%s: connection lost during %s (%s); reconnecting", self.name,
                                what, code.name if code else e)
                    self.close()
                    try:
                        self.open(timeout=max(0.1, deadline - time.monotonic()))
                        self.reconnects += 1
                        self._stale = True
                        reopened = True
                    except ControlPlaneError as oe:
                        log.info("%s: reconnect failed: %s", self.name, oe)
                else:
                    log.info("%s: device has no pipeline yet; waiting", self.name)
                if not reopened and not backoff.sleep():
                    raise ControlPlaneError(
                        f"{self.name} ({self.grpc_addr}): unavailable for "
                        f"{self.retry_timeout:g} s during {what}"
                        + (" (device restarted without a pipeline)" if waiting else "")) from e

    def _error(self, what: str, e: BaseException) -> ControlPlaneError:
        if isinstance(e, ControlPlaneError):
            return e
        code = grpc_code(e)
        hint = ""
        if code == grpc.StatusCode.PERMISSION_DENIED:
            hint = " (not the primary client: another controller has a higher election id?)"
        elif code == grpc.StatusCode.FAILED_PRECONDITION:
            hint = " (no pipeline on the device? run `mltcp switch push` first)"
        return ControlPlaneError(f"{self.name} ({self.grpc_addr}): {what} failed: "
                                 f"{str(e).strip()}{hint}")

    # --- pipeline -------------------------------------------------------------------------

    def _push(self, p4info_path: Path, config_path: Path | None) -> None:
        self.client.set_fwd_pipe_config(str(p4info_path),
                                        str(config_path) if config_path else os.devnull)
        self._attach()

    def _attach(self) -> None:
        E.use_p4info(self.client.get_p4info())

    def push_pipeline(self, p4info_path: Path | str = P4INFO_PATH,
                      config_path: Path | str | None = None) -> None:
        """SetForwardingPipelineConfig(VERIFY_AND_COMMIT) with the P4Info text file and the
        device config (BMv2 JSON for BMv2; None sends an empty config, which the software
        switch accepts). Then loads the P4Info back from the device."""
        p4info_path = Path(p4info_path)
        config_path = Path(config_path) if config_path else None
        for p, what in ((p4info_path, "P4Info"), (config_path, "device config")):
            if p is not None and not p.is_file():
                raise ControlPlaneError(f"{p}: {what} file not found")
        previous, self._pipeline = self._pipeline, (p4info_path, config_path)
        try:
            self.call(lambda: self._push(p4info_path, config_path), "pipeline push")
        except BaseException:
            self._pipeline = previous
            raise

    def attach(self, wait: bool = False) -> None:
        """Use the pipeline already on the device (GetForwardingPipelineConfig).

        With wait=True, a device without a pipeline is polled (up to `retry_timeout`) until
        someone pushes one, instead of failing at once."""
        if wait:
            self._stale = True  # FAILED_PRECONDITION now means "wait", as after a restart
            self.call(lambda: None, "waiting for a pipeline on the device")
        else:
            self.call(self._attach, "reading the P4Info from the device")

    # --- tables -----------------------------------------------------------------------------

    @staticmethod
    def _upsert(te) -> None:
        try:
            te.insert()
        except P4RuntimeWriteException as e:
            if _write_codes(e) == {code_pb2.ALREADY_EXISTS}:
                te.modify()
            else:
                raise

    def install_routes(self, routes: Iterable[Route]) -> int:
        """Insert (or modify) one MyIngress.ipv4_lpm entry per route. Returns the count."""
        routes = list(routes)
        for r in routes:
            self.call(lambda r=r: self._upsert(E.route_entry(r)), f"route {r.prefix}")
        return len(routes)

    def set_ecn_threshold(self, port: int, threshold: int) -> None:
        """MyEgress.ecn_threshold[port] = set_ecn_threshold(threshold) (insert or modify)."""
        check_port(port, "command line", "port")
        check_threshold(threshold, "command line", "threshold")
        self.call(lambda: self._upsert(E.ecn_entry(port, threshold)),
                  f"ECN threshold on port {port}")

    def clear_ecn_threshold(self, port: int) -> bool:
        """Delete the port's ECN entry (no marking). False if there was none."""
        check_port(port, "command line", "port")

        def delete() -> bool:
            try:
                E.ecn_entry(port).delete()
                return True
            except P4RuntimeWriteException as e:
                if _write_codes(e) == {code_pb2.NOT_FOUND}:
                    return False
                raise

        return self.call(delete, f"clearing ECN threshold on port {port}")

    def read_table(self, table: str) -> list:
        """All entries of a table as p4runtime_pb2.TableEntry messages."""
        def read():
            with E.silent():
                return [te.msg() for te in sh.TableEntry(table).read()]
        return self.call(read, f"reading {table}")

    # --- counters -----------------------------------------------------------------------

    def _read_counters(self) -> CounterSnapshot:
        with E.silent():
            return self._read_counters_raw()

    def _read_counters_raw(self) -> CounterSnapshot:
        snap = CounterSnapshot(self.name, self.grpc_addr, time.time())
        for m in self._read_raw(E.counter_read_entity(E.C_JOB_TX)):
            s = snap.job(m.counter_entry.index.index)
            s.tx_packets = m.counter_entry.data.packet_count
            s.tx_bytes = m.counter_entry.data.byte_count
        for m in self._read_raw(E.counter_read_entity(E.C_JOB_ECN_MARKS)):
            snap.job(m.counter_entry.index.index).ecn_marks = m.counter_entry.data.packet_count
        for m in self._read_raw(E.counter_read_entity(E.C_PARSE_ERRORS)):
            snap.parse_errors += m.counter_entry.data.packet_count
        for m in self._read_raw(E.register_read_entity(E.R_JOB_BYTES_RATIO)):
            raw = m.register_entry.data.bitstring
            snap.job(m.register_entry.index.index).bytes_ratio_q16 = (
                int.from_bytes(raw, "big") if raw else 0)
        return snap

    def _read_raw(self, entity):
        """Entities of one Read RPC through p4runtime-shell's client (raw protos: the shell's
        per-entity wrapper objects cost about as much again as the RPC itself)."""
        try:
            for rep in self.client.read_one(entity):
                yield from rep.entities
        except grpc.RpcError as e:  # raised while iterating, outside the shell's decorator
            raise P4RuntimeException(e) from None

    def read_counters(self) -> CounterSnapshot:
        """job_tx (packets, bytes), job_ecn_marks, job_bytes_ratio per job; parse_errors."""
        return self.call(self._read_counters, "reading counters")


def connect(grpc_addr: str = DEFAULT_GRPC, device_id: int = 0,
            election_id: tuple[int, int] = DEFAULT_ELECTION_ID, name: str | None = None,
            timeout: float = 10.0, retry_timeout: float = 30.0) -> SwitchConnection:
    """Open a session (waiting up to `timeout` s for the server). Close it, or use `with`."""
    conn = SwitchConnection(grpc_addr, device_id, election_id, name, retry_timeout)
    conn.open(timeout)
    atexit.register(conn.close)  # p4runtime-shell's stream thread would block interpreter exit
    return conn


def connect_switch(spec: SwitchSpec, timeout: float = 10.0, retry_timeout: float = 30.0,
                   election_id: tuple[int, int] | None = None) -> SwitchConnection:
    return connect(spec.grpc, spec.device_id, election_id or spec.election_id, spec.name,
                   timeout, retry_timeout)


def configure_switch(conn: SwitchConnection, spec: SwitchSpec, push: bool = False) -> dict:
    """Push (optional) and install one switch's routes and ECN thresholds."""
    if push:
        conn.push_pipeline(spec.p4info or P4INFO_PATH, spec.config)
    else:
        conn.attach()
    n_routes = conn.install_routes(spec.routes)
    for e in spec.ecn:
        conn.set_ecn_threshold(e.port, e.threshold)
    return {"switch": spec.name, "grpc": spec.grpc, "pushed": push, "routes": n_routes,
            "ecn_thresholds": len(spec.ecn)}


def install_topology(topo: Topology, push: bool = False, only: str | None = None,
                     timeout: float = 10.0) -> list[dict]:
    """Configure every switch of `topo` (or only the one named `only`), one at a time."""
    specs = [topo.switch(only)] if only else list(topo.switches)
    out = []
    for spec in specs:
        with connect_switch(spec, timeout) as conn:
            out.append(configure_switch(conn, spec, push))
    return out


__all__ = [
    "Backoff", "ControlPlaneError", "EcnThreshold", "Route", "SwitchConnection",
    "configure_switch", "connect", "connect_switch", "grpc_code", "install_topology",
    "reader_election_id",
]
