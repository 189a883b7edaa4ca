"""Authenticated datagrams: a per-connection key and a 64-bit MAC on every datagram.

The MAC is keyed BLAKE2b (``hashlib.blake2b(key=..., digest_size=8)``, RFC 7693's keyed mode) over
every byte of the datagram before the tag: shim, transport header, SACK blocks, payload and, in a
handshake datagram, the key. A receiver checks it before it looks at a byte of payload, a sender
before it takes an ACK; a datagram whose tag does not verify is dropped and counted, never used.

Where the connection key comes from:

* **pre-shared key** (``--psk FILE`` on both ends): key = BLAKE2b(conn_id, key=PSK). Never on the
  wire, so nobody without the PSK can make a datagram either end accepts, on-path or not.
* **handshake** (no PSK, the default): the sender draws 128 random bits per connection and sends
  them in clear (tflag ``T_KEY``) on its data datagrams until an ACK carrying a valid tag shows the
  receiver has them. The receiver takes the key from the first datagram of a connection and keeps
  it: a later ``T_KEY`` never replaces it. Whoever does not see those first datagrams (an off-path
  spoofer, or an on-path one who arrives later) cannot forge; whoever saw them can.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from .wire import KEY_LEN, SHIM_LEN, T_AUTH, T_KEY, TAG_LEN  # 8-byte MAC; 16-byte handshake key

_TFLAGS_AT = SHIM_LEN + 30  # the transport header's tflags byte (wire.HDR: I Q Q I I H, then B)

MIN_PSK = 16  # bytes a pre-shared key needs at least
_PSK_PERSON = b"mltcp-conn-key"


def new_conn_key() -> bytes:
    """A fresh 128-bit connection key from the OS CSPRNG."""
    return secrets.token_bytes(KEY_LEN)


def psk_conn_key(psk: bytes, conn_id: int) -> bytes:
    """The connection key both ends derive from a pre-shared key and the 48-bit conn_id."""
    if len(psk) > 64:  # BLAKE2b keys are at most 64 bytes
        psk = hashlib.blake2b(psk, digest_size=64).digest()
    return hashlib.blake2b(conn_id.to_bytes(8, "big"), key=psk, digest_size=KEY_LEN, person=_PSK_PERSON[:16]).digest()


def tag(key: bytes, data) -> bytes:
    """The 8-byte MAC of ``data`` (bytes or a buffer slice) under ``key``."""
    return hashlib.blake2b(data, key=key, digest_size=TAG_LEN).digest()


def seal(dgram: bytes, key: bytes, send_key: bool = False) -> bytes:
    """``dgram`` (shim, header, SACKs, payload) made authenticated: its tflags get T_AUTH (and
    T_KEY with ``send_key``), then the key (if sent) and the MAC are appended."""
    flags = T_AUTH | (T_KEY if send_key else 0)
    if dgram[_TFLAGS_AT] & flags != flags:  # (the data path encodes them already: no copy)
        head = bytearray(dgram[: _TFLAGS_AT + 1])
        head[_TFLAGS_AT] |= flags
        dgram = bytes(head) + dgram[_TFLAGS_AT + 1 :]
    if send_key:
        dgram += key
    return dgram + tag(key, dgram)


def verify(key: bytes, buf, end: int) -> bool:
    """True if ``buf[end:end + TAG_LEN]`` is the MAC of ``buf[:end]`` (constant-time compare)."""
    return hmac.compare_digest(tag(key, buf[:end]), bytes(buf[end : end + TAG_LEN]))


def read_psk(path: str | Path) -> bytes:
    """A pre-shared key file's bytes (surrounding whitespace stripped). ValueError naming the file
    if it cannot be read or holds fewer than :data:`MIN_PSK` bytes."""
    p = Path(path)
    try:
        data = p.read_bytes().strip()
    except OSError as e:
        raise ValueError(f"{p}: cannot read the pre-shared key: {e.strerror}") from None
    if len(data) < MIN_PSK:
        raise ValueError(
            f"{p}: a pre-shared key needs at least {MIN_PSK} bytes, the file has "
            f"{len(data)} (e.g. `head -c 32 /dev/urandom | base64 > {p.name}`)"
        )
    return data
