"""P4Runtime control plane for mltcp.p4 on BMv2, Tofino (via its P4Runtime server) or the
project's software switch, on the project's own client (grpcio and the p4runtime protos).

Usage::

    from mltcp.controlplane.client import connect
    from mltcp.controlplane.topology import Route

    with connect("127.0.0.1:9559", device_id=0) as sw:        # waits for the server
        sw.push_pipeline()                  # packaged P4Info; config_path=BMv2 JSON for BMv2
        sw.install_routes([Route("10.0.0.2/32", 2, "00:00:00:00:00:02")])
        sw.set_ecn_threshold(port=2, threshold=20)
        snap = sw.read_counters()           # CounterSnapshot: per-job tx/bytes/marks/ratio
        print(snap.jobs[1].tx_packets, snap.parse_errors)

    # every switch of a topology, checked first (mltcp.controlplane.install)
    install_topology(load_topology("controlplane/topologies/dumbbell.toml"), push=True)

Each :class:`SwitchConnection` owns its session (:class:`~mltcp.controlplane.session.Session`:
one gRPC channel, one arbitration stream) and its P4Info index, so a process may hold
connections to many switches at once. (p4runtime-shell stays for the interactive REPL and ptf.)

Every operation survives a target restart: if the server is UNAVAILABLE, or the arbitration
stream died, the connection is re-opened with exponential backoff (up to ``retry_timeout``
seconds), the pipeline re-pushed if this connection pushed one and the device lost it, every
route and ECN threshold this connection installed is written again (a journal kept by the
connection), and the operation repeated (table writes are insert-or-modify, so repeating them
is safe). If the entries cannot be restored, the operation raises :class:`ControlPlaneError`
saying how many were; it never reports success over an emptied table.
:meth:`SwitchConnection.verify` reads the tables back and lists what is missing.

TLS: ``connect(..., tls=TlsOptions(ca="ca.pem"))`` (server certificate checked against ``ca``;
``cert``/``key`` add a client certificate for servers that require one).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from mltcp.p4src import P4INFO_PATH
from mltcp.p4src import names as N

from . import entries as E
from .counters import CounterSnapshot
from .session import HandshakeError, Session
from .topology import EcnThreshold, Route, SwitchSpec, check_port, check_threshold

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_GRPC = "127.0.0.1:9559"
# what a restarted target answers a client it does not know: no pipeline, not the primary
_RESTART_CODES = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND)
DEFAULT_ELECTION_ID = (1, 0)


class ControlPlaneError(RuntimeError):
    """A P4Runtime operation failed (message says which switch and what)."""


class PipelineFileError(ControlPlaneError, ValueError):
    """A P4Info or device config file is missing, unreadable or not what it should be (bad
    input: the CLI exits 2). The message names the file."""


class InstallError(ControlPlaneError):
    """A multi-switch install stopped at one switch. ``done``: summaries of the switches that
    were configured; ``failed``: the switch's name; ``partial``: what was installed on it
    before the error; ``left``: names of the switches not attempted."""

    def __init__(self, message: str, done: list[dict], failed: str, partial: dict, left: list[str]):
        super().__init__(message)
        self.done, self.failed, self.partial, self.left = done, failed, partial, left


class _WriteFailed(Exception):
    """Some updates of a batch failed (not a connection problem): [(index, code name, msg)]."""

    def __init__(self, failed: list[tuple[int, str, str]], total: int):
        super().__init__(f"{len(failed)} of {total} updates failed")
        self.failed, self.total = failed, total


@dataclass(frozen=True)
class TlsOptions:
    """Client side of TLS: ``ca`` = PEM root(s) the server certificate must chain to (None: the
    system roots); ``cert`` + ``key`` = client certificate for mutual TLS."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def check(self) -> "TlsOptions":
        if (self.cert is None) != (self.key is None):
            raise PipelineFileError("TLS: give both a client certificate and its key")
        for p in (self.ca, self.cert, self.key):
            if p is not None and not Path(p).is_file():
                raise PipelineFileError(f"{p}: TLS file not found")
            if p is not None:
                try:
                    Path(p).read_bytes()
                except OSError as e:
                    raise PipelineFileError(f"{p}: cannot read TLS file: {e.strerror}") from None
        return self

    def _read(self, p: Path | None) -> bytes | None:
        return Path(p).read_bytes() if p is not None else None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self._read(self.ca), self._read(self.key), self._read(self.cert))


def read_p4info(path: Path | str) -> p4info_pb2.P4Info:
    """Parse a text-format P4Info file; :class:`PipelineFileError` (one line, naming the file)
    if it cannot be read, does not parse, or lacks mltcp.p4's tables."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PipelineFileError(f"{path}: P4Info file not found") from None
    except IsADirectoryError:
        raise PipelineFileError(f"{path}: is a directory, not a P4Info file") from None
    except UnicodeDecodeError as e:
        raise PipelineFileError(f"{path}: not a P4Info text file (not UTF-8 text: byte {e.start})") from None
    except OSError as e:
        raise PipelineFileError(f"{path}: cannot read the P4Info file: {e.strerror}") from None
    info = p4info_pb2.P4Info()
    try:
        # unknown fields are skipped (P4Info from a newer p4c); the table check catches the rest
        text_format.Merge(text, info, allow_unknown_field=True)
    except text_format.ParseError as e:
        raise PipelineFileError(f"{path}: not a P4Info text file ({str(e).splitlines()[0]})") from None
    have = {t.preamble.name for t in info.tables}
    lack = [t for t in (N.T_IPV4_LPM, N.T_ECN_THRESHOLD) if t not in have]
    if lack:
        raise PipelineFileError(
            f"{path}: not a P4Info of mltcp.p4 (no table {', '.join(lack)}; {len(info.tables)} tables in the file)"
        )
    return info


def read_device_config(path: Path | str | None) -> bytes:
    if path is None:
        return b""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PipelineFileError(f"{path}: device config file not found") from None
    except OSError as e:
        raise PipelineFileError(f"{path}: cannot read the device config: {e.strerror}") from None


def _port_open(addr: str, timeout: float = 0.5) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def reader_election_id() -> tuple[int, int]:
    """An election id for read-only clients: below any writer's (1, x) and unique per process,
    so a `watch` never takes mastership from, or collides with, an installing client."""
    return (0, (os.getpid() & 0xFFFFFFFF) or 1)


def grpc_code(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code of a grpc exception (or a failed handshake), if any."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return exc.code()
    if isinstance(exc, HandshakeError):
        return exc.code
    return None


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

    def __init__(
        self,
        grpc_addr: str = DEFAULT_GRPC,
        device_id: int = 0,
        election_id: tuple[int, int] = DEFAULT_ELECTION_ID,
        name: str | None = None,
        retry_timeout: float = 30.0,
        tls: TlsOptions | None = None,
    ):
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = tuple(election_id)
        self.name = name or grpc_addr
        self.retry_timeout = retry_timeout
        self.tls = tls.check() if tls is not None else None
        self.client: Session | None = None
        self.index: E.P4InfoIndex | None = None  # of the device's P4Info (attach/push)
        # pushed by us (P4Info message, device config, file name): re-pushed if the device
        # comes back without it
        self._pipeline: tuple[p4info_pb2.P4Info, bytes, str] | None = None
        self._stale = False  # reconnected; pipeline/P4Info not yet restored
        self.reconnects = 0
        # the journal: what this connection installed (replayed after a restart)
        self._routes: dict[str, Route] = {}
        self._ecn: dict[int, int] = {}
        self._progress: dict[int, tuple] = {}  # port -> (ProgressPolicy, base threshold)
        self.restored = 0  # entries re-installed after reconnects (all reconnects together)

    # --- session ------------------------------------------------------------------------

    def open(self, timeout: float = 10.0) -> "SwitchConnection":
        """Wait (up to `timeout` s) for the server and do the arbitration handshake."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(deadline)
        last = "no answer"
        while True:
            session = Session(
                self.grpc_addr, self.device_id, self.election_id, self.tls.credentials() if self.tls else None
            )
            if session.wait_ready(max(0.05, deadline - time.monotonic())):
                try:
                    session.arbitrate(min(5.0, max(1.0, deadline - time.monotonic())))
                    if not session.primary:
                        log.info("%s: not the primary client (election id %s): read-only", self.name, self.election_id)
                    self.client = session
                    return self
                except HandshakeError as e:
                    last = f"arbitration handshake failed ({e}; device id or election id rejected?)"
            else:
                last = "server not reachable"
                if _port_open(self.grpc_addr):
                    last = "the port accepts connections but no gRPC session comes up " + (
                        "(a TLS server? give the CA with --tls-ca)"
                        if self.tls is None
                        else "(TLS handshake failed: wrong CA, server name or client certificate?)"
                    )
            session.close()
            if not backoff.sleep():
                raise ControlPlaneError(
                    f"{self.name} ({self.grpc_addr}, device {self.device_id}): {last} after {timeout:g} s"
                )

    def close(self) -> None:
        """End the session (idempotent)."""
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def __enter__(self) -> "SwitchConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stream_alive(self) -> bool:
        c = self.client
        return c is not None and c.stream_alive

    def _restore(self) -> None:
        """After a reconnect: re-push our pipeline if the device lost it (else re-read the
        device's P4Info), then write every entry of the journal again."""
        if self._pipeline is not None and not self._device_has(self._pipeline[0]):
            self._push(*self._pipeline)
        else:
            self._attach()
        self._replay()
        self._stale = False

    def _device_has(self, p4info: p4info_pb2.P4Info) -> bool:
        try:
            return self.client.get_p4info() == p4info
        except grpc.RpcError as e:
            if grpc_code(e) == grpc.StatusCode.FAILED_PRECONDITION:
                return False  # restarted without a pipeline
            raise

    def _idx(self) -> E.P4InfoIndex:
        if self.index is None:
            raise ControlPlaneError(f"{self.name} ({self.grpc_addr}): no P4Info yet (push a pipeline or attach first)")
        return self.index

    def _entries(self, build: Callable[[E.P4InfoIndex], list]) -> list:
        """``build(index)``; a P4Info without mltcp.p4's objects is a ControlPlaneError."""
        try:
            return build(self._idx())
        except KeyError as e:
            raise ControlPlaneError(
                f"{self.name} ({self.grpc_addr}): the device's P4Info is not mltcp.p4's: {e.args[0]}"
            ) from None

    def journal(self) -> list[p4runtime_pb2.TableEntry]:
        """The entries this connection installed, as TableEntry messages of the current P4Info."""
        return self._entries(
            lambda idx: (
                [E.route_entry(idx, r) for r in self._routes.values()]
                + [E.ecn_entry(idx, p, k) for p, k in self._ecn.items()]
                + [te for p, (pol, k) in self._progress.items() for te in E.progress_entries(idx, p, pol, k)]
            )
        )

    def _describe(self, te: p4runtime_pb2.TableEntry) -> str:
        return E.describe(self.index, te) if self.index is not None else "entry"

    def _replay(self) -> None:
        tes = self.journal()
        if not tes:
            return
        try:
            self._upsert_all(tes)
        except _WriteFailed as e:
            first = "; ".join(f"{self._describe(tes[i])}: {code} {msg}" for i, code, msg in e.failed[:3])
            raise ControlPlaneError(
                f"{self.name} ({self.grpc_addr}): the switch came back without the {len(tes)} "
                f"entries this connection installed; restoring them failed for {len(e.failed)} "
                f"({e.total - len(e.failed)} of {len(tes)} restored): {first}"
            ) from None
        self.restored += len(tes)
        log.warning(
            "%s: reconnected; re-installed %d routes and %d ECN thresholds",
            self.name,
            len(self._routes),
            len(self._ecn),
        )

    def verify(self) -> list[str]:
        """Read the tables back; one line per journal entry the device lacks or holds with
        other action parameters ([] = everything this connection installed is there)."""

        def check() -> list[str]:
            have = {}
            for table in (N.T_IPV4_LPM, N.T_ECN_THRESHOLD):
                for m in self._read_raw(self._entries(lambda idx: E.table_read_entity(idx, table))):
                    te = m.table_entry
                    have[(te.table_id, _match_key(te))] = _action_key(te)
            out = []
            for te in self.journal():
                got = have.get((te.table_id, _match_key(te)))
                if got is None:
                    out.append(f"{self._describe(te)}: missing")
                elif got != _action_key(te):
                    out.append(f"{self._describe(te)}: other action parameters")
            return out

        return self.call(check, "verifying the installed entries")

    def call(self, fn: Callable[[], T], what: str = "operation") -> T:
        """Run `fn` (which uses this connection's session), reconnecting and repeating it
        while the target is unavailable, for up to `retry_timeout` seconds.

        After a reconnect the pipeline is re-pushed if this connection pushed one; otherwise
        the P4Info is re-read from the device, waiting (same time limit) while the restarted
        device has no pipeline yet (someone else is expected to push it)."""
        deadline: float | None = None
        backoff: Backoff | None = None
        while True:
            try:
                if not self.stream_alive:
                    raise ConnectionResetError("arbitration stream closed")
                if self._stale:
                    self._restore()
                return fn()
            except (grpc.RpcError, ConnectionResetError) as e:
                code = grpc_code(e)
                lost = (
                    isinstance(e, ConnectionResetError) or not self.stream_alive or code == grpc.StatusCode.UNAVAILABLE
                )
                if not lost and code in _RESTART_CODES and self.client is not None:
                    # a restarted target answers unary calls (the channel reconnects by itself)
                    # before our dead stream's thread has noticed: give it a moment to end
                    self.client.stream_recv_thread.join(1.0)
                    lost = not self.stream_alive
                waiting = self._stale and code == grpc.StatusCode.FAILED_PRECONDITION
                if not (lost or waiting):
                    raise self._error(what, e) from e
                if deadline is None:
                    deadline = time.monotonic() + self.retry_timeout
                    backoff = Backoff(deadline)
                reopened = False
                if lost:
                    log.warning(
                        "%s: connection lost during %s (%s); reconnecting", self.name, what, code.name if code else e
                    )
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
                        + (" (device restarted without a pipeline)" if waiting else "")
                    ) from e

    def _error(self, what: str, e: BaseException) -> ControlPlaneError:
        if isinstance(e, ControlPlaneError):
            return e
        code = grpc_code(e)
        hint = ""
        if code == grpc.StatusCode.PERMISSION_DENIED:
            hint = " (not the primary client: another controller has a higher election id?)"
        elif code == grpc.StatusCode.FAILED_PRECONDITION:
            hint = " (no pipeline on the device? run `mltcp switch push` first)"
        detail = (
            f"{code.name}: {e.details()}" if isinstance(e, grpc.RpcError) and hasattr(e, "details") else str(e).strip()
        )
        return ControlPlaneError(f"{self.name} ({self.grpc_addr}): {what} failed: {detail}{hint}")

    # --- pipeline -------------------------------------------------------------------------

    def _push(self, p4info: p4info_pb2.P4Info, device_config: bytes, _source: str = "") -> None:
        self.client.set_pipeline(p4info, device_config)
        self._attach()

    def _attach(self) -> None:
        self.index = E.index(self.client.get_p4info())

    def push_pipeline(self, p4info_path: Path | str = P4INFO_PATH, config_path: Path | str | None = None) -> None:
        """SetForwardingPipelineConfig(VERIFY_AND_COMMIT) with the P4Info text file and the
        device config (BMv2 JSON for BMv2; None sends an empty config, which the software
        switch accepts). Then loads the P4Info back from the device. Both files are read and
        checked first (:class:`PipelineFileError` names the file). The push resets the device,
        so the journal of installed entries starts empty again."""
        p4info = read_p4info(p4info_path)
        device_config = read_device_config(config_path)
        previous, self._pipeline = self._pipeline, (p4info, device_config, str(p4info_path))
        try:
            self.call(lambda: self._push(p4info, device_config), "pipeline push")
        except BaseException:
            self._pipeline = previous
            raise
        self._routes.clear()
        self._ecn.clear()
        self._progress.clear()

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

    # updates per WriteRequest: a batch that fails comes back with one p4.v1.Error per update
    # in the trailing metadata, which gRPC caps at 8 KiB (soft) / 16 KiB (hard); 256 updates
    # answered ALREADY_EXISTS took 26 KB and the answer was lost (RESOURCE_EXHAUSTED)
    _BATCH = 32

    def _upsert_all(self, tes: list[p4runtime_pb2.TableEntry]) -> None:
        """Insert-or-modify every entry, in batches (repeating it is safe). Raises
        :class:`_WriteFailed` for updates refused for another reason than ALREADY_EXISTS."""
        failed: list[tuple[int, str, str]] = []
        for at in range(0, len(tes), self._BATCH):
            chunk = tes[at : at + self._BATCH]
            errs = self.client.write(p4runtime_pb2.Update.INSERT, chunk)
            exists = [i for i, code, _ in errs if code == code_pb2.ALREADY_EXISTS]
            failed += [
                (at + i, code_pb2.Code.Name(code), msg) for i, code, msg in errs if code != code_pb2.ALREADY_EXISTS
            ]
            if exists:
                errs = self.client.write(p4runtime_pb2.Update.MODIFY, [chunk[i] for i in exists])
                failed += [(at + exists[i], code_pb2.Code.Name(code), msg) for i, code, msg in errs]
        if failed:
            raise _WriteFailed(sorted(failed), len(tes))

    def _install(self, build: Callable[[E.P4InfoIndex], list], what: str, record: Callable[[int], None]) -> None:
        """Upsert the entries ``build(index)`` makes through :meth:`call` (built again after a
        reconnect, from the P4Info then on the device); ``record(i)`` for each that succeeded."""
        tes: list = []

        def run() -> None:
            tes[:] = self._entries(build)
            self._upsert_all(tes)

        try:
            self.call(run, what)
        except _WriteFailed as e:
            bad = {i for i, _, _ in e.failed}
            for i in range(len(tes)):
                if i not in bad:
                    record(i)
            lines = "; ".join(f"{self._describe(tes[i])}: {code} {msg}" for i, code, msg in e.failed[:5])
            more = f" (and {len(e.failed) - 5} more)" if len(e.failed) > 5 else ""
            err = ControlPlaneError(
                f"{self.name} ({self.grpc_addr}): {what}: {len(e.failed)} of {len(tes)} refused: {lines}{more}"
            )
            err.installed = len(tes) - len(e.failed)
            raise err from None
        for i in range(len(tes)):
            record(i)

    def install_routes(self, routes: Iterable[Route]) -> int:
        """Insert (or modify) one MyIngress.ipv4_lpm entry per route. Returns the count.
        On refusal the error says which routes; the others are installed (and journaled)."""
        routes = list(routes)
        if not routes:
            return 0
        self._install(
            lambda idx: [E.route_entry(idx, r) for r in routes],
            f"{len(routes)} routes",
            lambda i: self._routes.__setitem__(routes[i].prefix, routes[i]),
        )
        return len(routes)

    def set_ecn_threshold(self, port: int, threshold: int) -> None:
        """MyEgress.ecn_threshold[port] = set_ecn_threshold(threshold) (insert or modify)."""
        check_port(port, "command line", "port")
        check_threshold(threshold, "command line", "threshold")
        self._install(
            lambda idx: [E.ecn_entry(idx, port, threshold)],
            f"ECN threshold on port {port}",
            lambda i: self._ecn.__setitem__(port, threshold),
        )

    def set_progress_policy(self, port: int, policy, base_threshold: int | None = None) -> int:
        """In-network MLTCP on ``port`` (mltcp.progress_policy.ProgressPolicy): one entry per
        bytes_ratio band in MyEgress.progress_ecn (thresholds scaled from ``base_threshold``) or
        MyIngress.progress_priority (insert or modify), and MyEgress.progress_contest when the
        policy has a contest window (one it no longer has is not deleted: the emulation programs
        fresh switches). ``off`` installs nothing. Returns the count."""
        check_port(port, "command line", "port")
        if base_threshold is not None:
            check_threshold(base_threshold, "command line", "threshold")
        tes = self._entries(lambda idx: E.progress_entries(idx, port, policy, base_threshold))
        if not tes:
            return 0
        self._install(
            lambda idx: E.progress_entries(idx, port, policy, base_threshold),
            f"{policy.name} on port {port}",
            lambda i: self._progress.__setitem__(port, (policy, base_threshold)),
        )
        return len(tes)

    def clear_ecn_threshold(self, port: int) -> bool:
        """Delete the port's ECN entry (no marking). False if there was none."""
        check_port(port, "command line", "port")
        what = f"clearing ECN threshold on port {port}"

        def delete() -> bool:
            te = self._entries(lambda idx: E.ecn_entry(idx, port))
            errs = self.client.write(p4runtime_pb2.Update.DELETE, [te])
            if not errs:
                return True
            ((_, code, msg),) = errs
            if code == code_pb2.NOT_FOUND:
                return False
            raise ControlPlaneError(f"{self.name} ({self.grpc_addr}): {what} failed: {code_pb2.Code.Name(code)} {msg}")

        had = self.call(delete, what)
        self._ecn.pop(port, None)
        return had

    def read_table(self, table: str) -> list[p4runtime_pb2.TableEntry]:
        """All entries of a table as p4runtime_pb2.TableEntry messages."""

        def read():
            ent = self._entries(lambda idx: E.table_read_entity(idx, table))
            return [m.table_entry for m in self._read_raw(ent)]

        return self.call(read, f"reading {table}")

    # --- counters -----------------------------------------------------------------------

    def _read_raw(self, entity: p4runtime_pb2.Entity):
        """The entities of one Read RPC (raw protos)."""
        return list(self.client.read(entity))

    def _read_counters(self, registers: bool = True) -> CounterSnapshot:
        snap = CounterSnapshot(self.name, self.grpc_addr, time.time())
        read = self._read_raw

        def entity(kind_fn, name):
            return self._entries(lambda idx: kind_fn(idx, name))

        for m in read(entity(E.counter_read_entity, N.C_JOB_TX)):
            s = snap.job(m.counter_entry.index.index)
            s.tx_packets = m.counter_entry.data.packet_count
            s.tx_bytes = m.counter_entry.data.byte_count
        for m in read(entity(E.counter_read_entity, N.C_JOB_ECN_MARKS)):
            snap.job(m.counter_entry.index.index).ecn_marks = m.counter_entry.data.packet_count
        for m in read(entity(E.counter_read_entity, N.C_PARSE_ERRORS)):
            snap.parse_errors += m.counter_entry.data.packet_count
        if registers:
            for m in read(entity(E.register_read_entity, N.R_JOB_BYTES_RATIO)):
                raw = m.register_entry.data.bitstring  # minimal width (b"" for 0) or padded
                snap.job(m.register_entry.index.index).bytes_ratio_q16 = int.from_bytes(raw, "big") if raw else 0
        return snap

    def read_counters(self, registers: bool = True) -> CounterSnapshot:
        """job_tx (packets, bytes), job_ecn_marks, job_bytes_ratio per job; parse_errors.
        ``registers=False`` leaves job_bytes_ratio out (BMv2's PI does not read registers)."""
        return self.call(lambda: self._read_counters(registers), "reading counters")


def connect(
    grpc_addr: str = DEFAULT_GRPC,
    device_id: int = 0,
    election_id: tuple[int, int] = DEFAULT_ELECTION_ID,
    name: str | None = None,
    timeout: float = 10.0,
    retry_timeout: float = 30.0,
    tls: TlsOptions | None = None,
) -> SwitchConnection:
    """Open a session (waiting up to `timeout` s for the server). Close it, or use `with`."""
    conn = SwitchConnection(grpc_addr, device_id, election_id, name, retry_timeout, tls)
    conn.open(timeout)
    atexit.register(conn.close)  # end the stream and channel cleanly at interpreter exit
    return conn


def connect_switch(
    spec: SwitchSpec,
    timeout: float = 10.0,
    retry_timeout: float = 30.0,
    election_id: tuple[int, int] | None = None,
    tls: TlsOptions | None = None,
) -> SwitchConnection:
    return connect(spec.grpc, spec.device_id, election_id or spec.election_id, spec.name, timeout, retry_timeout, tls)


def configure_switch(
    conn: SwitchConnection, spec: SwitchSpec, push: bool = False, progress: dict | None = None
) -> dict:
    """Push (optional) and install one switch's routes and ECN thresholds. ``progress`` (if
    given) is filled in as it goes, so a caller can tell what a failure left behind."""
    progress = {} if progress is None else progress
    progress.update(pushed=False, routes=0, ecn_thresholds=0)
    if push:
        conn.push_pipeline(spec.p4info or P4INFO_PATH, spec.config)
        progress["pushed"] = True
    else:
        conn.attach()
    try:
        progress["routes"] = conn.install_routes(spec.routes)
    except ControlPlaneError as e:
        progress["routes"] = getattr(e, "installed", 0)
        raise
    for e in spec.ecn:
        conn.set_ecn_threshold(e.port, e.threshold)
        progress["ecn_thresholds"] += 1
    return {
        "switch": spec.name,
        "grpc": spec.grpc,
        "pushed": push,
        "routes": progress["routes"],
        "ecn_thresholds": len(spec.ecn),
    }


def _num(b: bytes) -> int:
    # P4Runtime byte strings: a target may answer with the minimal width (BMv2/PI) or the
    # field's full width; both denote the same number.
    return int.from_bytes(b, "big")


def _match_key(te) -> tuple:
    """A table entry's match fields as numbers, independent of byte-string width and order."""
    key = []
    for m in te.match:
        kind = m.WhichOneof("field_match_type")
        f = getattr(m, kind)
        if kind == "lpm":
            key.append((m.field_id, kind, _num(f.value), f.prefix_len))
        elif kind == "ternary":
            key.append((m.field_id, kind, _num(f.value), _num(f.mask)))
        elif kind == "range":
            key.append((m.field_id, kind, _num(f.low), _num(f.high)))
        else:
            key.append((m.field_id, kind, _num(f.value)))
    return tuple(sorted(key))


def _action_key(te) -> tuple:
    """A table entry's direct action as numbers (width-independent), for comparing reads."""
    a = te.action.action
    return (a.action_id, tuple(sorted((p.param_id, _num(p.value)) for p in a.params)))


__all__ = [
    "Backoff",
    "ControlPlaneError",
    "EcnThreshold",
    "InstallError",
    "PipelineFileError",
    "Route",
    "SwitchConnection",
    "TlsOptions",
    "configure_switch",
    "connect",
    "connect_switch",
    "grpc_code",
    "read_p4info",
    "reader_election_id",
]
