"""A free TCP port on 127.0.0.1 for a test's server (bound and released: take it at once)."""

import socket


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
