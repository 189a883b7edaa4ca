"""Userspace MLTCP transport: a reliable, in-order byte stream per flow over UDP, with SACK,
RFC 6298 timeouts, ECN echo / CNPs, and the MLTCP shim on every datagram."""

from .receiver import Receiver
from .sender import FlowSender, build_cc, run_until
from .transport import SendResult, TransportError, TransportFault, TransportTimeout, UdpTransport, parse_hostport
from .wire import DEFAULT_PAYLOAD, MLTCP_UDP_PORT

__all__ = [
    "DEFAULT_PAYLOAD",
    "FlowSender",
    "MLTCP_UDP_PORT",
    "Receiver",
    "SendResult",
    "TransportError",
    "TransportFault",
    "TransportTimeout",
    "UdpTransport",
    "build_cc",
    "parse_hostport",
    "run_until",
]
