"""A lossy UDP relay for tests and demos on loopback: drops, reorders, duplicates and CE-marks
datagrams going to the receiver (and optionally drops ACKs coming back), with a seeded RNG.

Each direction has its own generator and every datagram draws the same number of values, so the
fate of the k-th data datagram (and of the k-th ACK) depends only on the seed and k, never on how
the two directions happen to interleave in time: a seeded run is reproducible datagram by datagram.

CE marks are real IP ECN bits: before forwarding a marked datagram the relay sets IP_TOS to ECT|CE
(3) on its upstream socket (Linux allows that for UDP), so the receiver sees it with IP_RECVTOS.
One upstream socket per client keeps the 5-tuple the receiver sees stable.
"""

from __future__ import annotations

import random
import selectors
import socket
import threading
import time

from . import sockbuf


class LossyRelay:
    def __init__(
        self,
        target: tuple[str, int],
        drop: float = 0.0,
        reorder: float = 0.0,
        duplicate: float = 0.0,
        ce: float = 0.0,
        ack_drop: float = 0.0,
        seed: int = 1,
        hold: int = 3,
        hold_time: float = 2e-3,
        bind: tuple[str, int] = ("127.0.0.1", 0),
        ce_fn=None,
    ):
        for name, p in dict(drop=drop, reorder=reorder, duplicate=duplicate, ce=ce, ack_drop=ack_drop).items():
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} probability must be in [0, 1], got {p}")
        self.target = target
        self.p = dict(drop=drop, reorder=reorder, duplicate=duplicate, ce=ce, ack_drop=ack_drop)
        self.rng = random.Random(seed)  # data path: 4 draws per datagram
        self.ack_rng = random.Random(seed ^ 0x5EED)  # ACK path: 1 draw per ACK
        self.hold, self.hold_time = hold, hold_time
        self.ce_fn = ce_fn  # optional ce_fn(datagram) -> bool, overrides the probability
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sockbuf.grow(self.sock, rcv=8 << 20)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self.addr = self.sock.getsockname()
        self.stats = dict(forwarded=0, dropped=0, reordered=0, duplicated=0, ce=0, acks=0, acks_dropped=0)
        self._up: dict[tuple, list] = {}  # client -> [upstream socket, its current TOS]
        self._held: list[list] = []  # [datagram, client, packets still to pass, deadline, CE mark]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.sock, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _upstream(self, client):
        up = self._up.get(client)
        if up is None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sockbuf.grow(s, rcv=4 << 20)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)
            s.connect(self.target)
            s.setblocking(False)
            up = self._up[client] = [s, 0x02]
            self._sel.register(s, selectors.EVENT_READ, client)
        return up

    def _forward(self, data: bytes, client, mark: bool) -> None:
        up = self._upstream(client)
        tos = 0x03 if mark else 0x02
        try:
            if up[1] != tos:
                up[0].setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
                up[1] = tos
            up[0].send(data)
        except OSError:
            return
        self.stats["forwarded"] += 1
        self.stats["ce"] += bool(mark)

    def _release(self, now: float, passed: int) -> None:
        keep = []
        for h in self._held:
            h[2] -= passed
            if h[2] <= 0 or now >= h[3]:
                self._forward(h[0], h[1], h[4])
            else:
                keep.append(h)
        self._held = keep

    def _from_client(self, data: bytes, client, now: float) -> None:
        p = self.p
        u_drop, u_reorder, u_dup, u_ce = (self.rng.random() for _ in range(4))
        if u_drop < p["drop"]:
            self.stats["dropped"] += 1
            return
        mark = self.ce_fn(data) if self.ce_fn else u_ce < p["ce"]
        if u_reorder < p["reorder"]:
            self.stats["reordered"] += 1
            self._held.append([data, client, self.hold, now + self.hold_time, mark])
            return
        self._forward(data, client, mark)
        if u_dup < p["duplicate"]:
            self.stats["duplicated"] += 1
            self._forward(data, client, mark)
        if self._held:
            self._release(now, 1)

    def _drop_ack(self) -> bool:
        self.stats["acks"] += 1
        if self.ack_rng.random() < self.p["ack_drop"]:
            self.stats["acks_dropped"] += 1
            return True
        return False

    def serve(self) -> None:
        while not self._stop.is_set():
            events = self._sel.select(self.hold_time / 2 if self._held else 0.05)
            now = time.monotonic()
            for key, _ in events:
                sock = key.fileobj
                while True:
                    try:
                        data, src = sock.recvfrom(65536)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    if key.data is None:
                        self._from_client(data, src, now)
                    else:  # from the receiver, back to the client
                        if self._drop_ack():
                            continue
                        try:
                            self.sock.sendto(data, key.data)
                        except OSError:
                            pass
            if self._held:
                self._release(now, 0)

    def start(self) -> "LossyRelay":
        self._thread = threading.Thread(target=self.serve, name="mltcp-relay", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._sel.close()
        self.sock.close()
        for s, _tos in self._up.values():
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
