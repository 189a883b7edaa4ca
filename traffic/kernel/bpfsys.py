"""The few bpf(2) map commands user space needs at run time, through ctypes.

bpftool does the loading (see :mod:`.loader`); per-iteration marks and per-socket reads happen
often, so they go straight to the syscall instead of spawning bpftool each time. Linux x86-64 and
arm64 only (the syscall number is looked up per machine).
"""

from __future__ import annotations

import ctypes
import os
import platform

_NR_BPF = {"x86_64": 321, "aarch64": 280}

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_GET_NEXT_KEY = 4
BPF_MAP_GET_NEXT_ID = 12
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ANY = 0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class BpfError(OSError):
    pass


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise BpfError(f"bpf syscall number unknown for {platform.machine()}")
    ret = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf(cmd {cmd}): {os.strerror(err)}")
    return ret


def map_fd_by_id(map_id: int) -> int:
    """An fd for the map with this id (the caller closes it)."""
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = map_id
    return _bpf(BPF_MAP_GET_FD_BY_ID, attr)


def map_ids(after: int = 0) -> list[int]:
    """Ids of every BPF map in the system above ``after`` (BPF_MAP_GET_NEXT_ID), ascending."""
    out, start = [], after
    while True:
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = start
        try:
            _bpf(BPF_MAP_GET_NEXT_ID, attr)
        except BpfError as e:
            if e.errno == 2:  # ENOENT: no more
                return out
            raise
        start = ctypes.c_uint32.from_buffer(attr, 4).value
        out.append(start)


def map_info(fd: int) -> dict:
    """struct bpf_map_info of an open map: type, id, key/value size, max_entries, flags, name."""
    info = ctypes.create_string_buffer(96)
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = fd
    ctypes.c_uint32.from_buffer(attr, 4).value = len(info)
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(info)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    typ, mid, ksz, vsz, maxe, flags = (ctypes.c_uint32.from_buffer(info, 4 * i).value for i in range(6))
    name = info.raw[24:40].split(b"\0", 1)[0].decode(errors="replace")
    return {
        "type": typ,
        "id": mid,
        "bytes_key": ksz,
        "bytes_value": vsz,
        "max_entries": maxe,
        "flags": flags,
        "name": name,
    }


def _elem_attr(fd: int, key: ctypes.Array, value: ctypes.Array, flags: int = 0) -> ctypes.Array:
    # union bpf_attr, map element commands: u32 map_fd; (pad) u64 key; u64 value; u64 flags
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = fd
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(key)
    ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(value)
    ctypes.c_uint64.from_buffer(attr, 24).value = flags
    return attr


def map_lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value under ``key``, or None if absent."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value_size)
    try:
        _bpf(BPF_MAP_LOOKUP_ELEM, _elem_attr(fd, k, v))
    except BpfError as e:
        if e.errno == 2:  # ENOENT
            return None
        raise
    return v.raw


def map_update(fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value, len(value))
    _bpf(BPF_MAP_UPDATE_ELEM, _elem_attr(fd, k, v, flags))


def map_keys(fd: int, key_size: int) -> list[bytes]:
    """Every key of a hash or array map (BPF_MAP_GET_NEXT_KEY from no key)."""
    out: list[bytes] = []
    cur = None
    while True:
        nxt = ctypes.create_string_buffer(key_size)
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = fd
        if cur is not None:
            ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(cur)
        ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(nxt)
        try:
            _bpf(BPF_MAP_GET_NEXT_KEY, attr)
        except BpfError as e:
            if e.errno == 2:  # ENOENT: the last key
                return out
            raise
        out.append(nxt.raw)
        cur = nxt
