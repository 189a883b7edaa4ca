"""In-process network namespaces for kernel-TCP runs: :func:`in_netns` moves the calling thread
into a namespace (setns) so sockets created inside it live there while the Python process stays
one process (BPF socket storage can then be read by socket fd). The namespaces are the Mininet
hosts' of the experiment's network (:mod:`.net`), named by a file such as ``/proc/<pid>/ns/net``
(:func:`netns_path`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    pass


def netns_path(pid: int) -> str:
    """The network namespace of process ``pid`` (a Mininet node's shell: ``node.pid``)."""
    return f"/proc/{pid}/ns/net"


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetnsError(f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(path: str | None):
    """Run the body with the current thread in the namespace of file ``path`` (None: stay where
    we are)."""
    if path is None:
        yield
        return
    try:
        target = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise NetnsError(f"network namespace {path}: {e.strerror}") from None
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)
