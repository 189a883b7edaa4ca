"""One P4Runtime session to one device: its own gRPC channel, the P4Runtime stub and the
arbitration stream (StreamChannel) with an election id. Built on grpcio and the ``p4runtime``
protos (p4.v1 p4runtime_pb2 / p4runtime_pb2_grpc); no module state, so one process can hold a
session to every switch at once. The retrying, journaling connection on top is
:class:`mltcp.controlplane.client.SwitchConnection`.

RPC errors are raised as they come (``grpc.RpcError``); a Write's per-update errors are
returned by :meth:`Session.write` as (index, canonical code, message).
"""

from __future__ import annotations

import logging
import queue
import threading

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

log = logging.getLogger(__name__)


class HandshakeError(Exception):
    """The arbitration handshake got no answer (``code``: the stream's gRPC status, if any)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code


def update_errors(e: grpc.RpcError, n: int) -> list[tuple[int, int, str]]:
    """The failed updates of a Write answered UNKNOWN: (index, canonical code, message), from
    the p4.v1.Error details (all n as UNKNOWN if the server sent none)."""
    details = None
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            details = status_pb2.Status.FromString(value).details
    out = []
    if details is not None and len(details) == n:
        for i, d in enumerate(details):
            err = p4runtime_pb2.Error()
            if d.Unpack(err) and err.canonical_code != code_pb2.OK:
                out.append((i, err.canonical_code, err.message))
        return out
    return [(i, code_pb2.UNKNOWN, e.details() or "write failed") for i in range(n)]


class Session:
    """A channel, a stub and an arbitrated stream. ``primary`` follows the server's
    arbitration updates; ``stream_alive`` is False once the stream has ended."""

    def __init__(
        self,
        grpc_addr: str,
        device_id: int,
        election_id: tuple[int, int],
        credentials: grpc.ChannelCredentials | None = None,
    ):
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = tuple(election_id)
        self.channel = (
            grpc.insecure_channel(grpc_addr) if credentials is None else grpc.secure_channel(grpc_addr, credentials)
        )
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.primary = False
        self.stream_error: grpc.RpcError | None = None
        self.stream_out_q: queue.Queue = queue.Queue()  # None ends the stream
        self._arbitrated = threading.Event()
        self._stream = None
        self.stream_recv_thread: threading.Thread | None = None

    def wait_ready(self, timeout: float) -> bool:
        """True once the channel is connected (False after ``timeout`` s)."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
            return True
        except grpc.FutureTimeoutError:
            return False

    # --- arbitration stream ----------------------------------------------------------------

    def _requests(self):
        while True:
            m = self.stream_out_q.get()
            if m is None:
                return
            yield m

    def _receive(self) -> None:
        try:
            for rep in self._stream:
                if rep.HasField("arbitration"):
                    self.primary = rep.arbitration.status.code == code_pb2.OK
                    self._arbitrated.set()
                elif rep.HasField("error"):
                    log.info("%s: stream error from the server: %s", self.grpc_addr, rep.error.message)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.stream_error = e
                log.debug("%s: stream ended: %s", self.grpc_addr, e.code().name)
        finally:
            self._arbitrated.set()  # wake a waiting handshake

    def arbitrate(self, timeout: float) -> None:
        """Open the StreamChannel and send the MasterArbitrationUpdate; wait (up to
        ``timeout`` s) for the answer. :class:`HandshakeError` if none comes."""
        self._stream = self.stub.StreamChannel(self._requests())
        self.stream_recv_thread = threading.Thread(
            target=self._receive, daemon=True, name=f"p4rt-stream-{self.grpc_addr}"
        )
        self.stream_recv_thread.start()
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self.stream_out_q.put(req)
        self._arbitrated.wait(timeout)
        if not self.stream_alive or not self._arbitrated.is_set():
            err = self.stream_error
            raise HandshakeError(
                err.details() if err is not None else "no answer", err.code() if err is not None else None
            )

    @property
    def stream_alive(self) -> bool:
        t = self.stream_recv_thread
        return t is not None and t.is_alive()

    def close(self) -> None:
        """End the stream and the channel (idempotent)."""
        self.stream_out_q.put(None)
        if self._stream is not None:
            self._stream.cancel()
        if self.stream_recv_thread is not None:
            self.stream_recv_thread.join(1.0)
        self.channel.close()

    # --- RPCs ------------------------------------------------------------------------------

    def _election(self, req) -> None:
        req.election_id.high, req.election_id.low = self.election_id

    def set_pipeline(self, p4info: p4info_pb2.P4Info, device_config: bytes) -> None:
        """SetForwardingPipelineConfig(VERIFY_AND_COMMIT)."""
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        self._election(req)
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        self.stub.SetForwardingPipelineConfig(req)

    def get_p4info(self) -> p4info_pb2.P4Info:
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE
        )
        return self.stub.GetForwardingPipelineConfig(req).config.p4info

    def write(self, utype: int, entries: list[p4runtime_pb2.TableEntry]) -> list[tuple[int, int, str]]:
        """One WriteRequest of ``utype`` table updates; the failed ones as (index, code,
        message). Errors of the request as a whole (UNAVAILABLE, PERMISSION_DENIED, ...) are
        raised."""
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        self._election(req)
        for te in entries:
            req.updates.add(type=utype).entity.table_entry.CopyFrom(te)
        try:
            self.stub.Write(req)
            return []
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNKNOWN:
                raise
            return update_errors(e, len(entries))

    def read(self, entity: p4runtime_pb2.Entity):
        """The entities one Read RPC returns (a generator: errors come while iterating)."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.add().CopyFrom(entity)
        for rep in self.stub.Read(req):
            yield from rep.entities
