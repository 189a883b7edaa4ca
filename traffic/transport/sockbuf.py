"""Socket buffer sizing: ask for big buffers; as root, past net.core.{r,w}mem_max (the FORCE options)."""

from __future__ import annotations

import socket

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def grow(sock: socket.socket, rcv: int | None = 4 << 20, snd: int | None = None) -> None:
    for size, force, plain in ((rcv, SO_RCVBUFFORCE, socket.SO_RCVBUF), (snd, SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        if not size:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:  # not root: capped by the sysctl maximum
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
            except OSError:
                pass
