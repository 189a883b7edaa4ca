"""mltcp-switch as a Mininet switch class.

``MltcpSwitch`` runs ``mltcp-switch`` (a subprocess, via :func:`switch_command`) on the switch's
Mininet interfaces in the root namespace (like Open vSwitch), Mininet port numbers = P4 ports.
On start it turns off TSO/GSO/GRO and TX checksum offload on both ends of each link (the
switch reads frames with AF_PACKET) and waits for the P4Runtime port. The switch drops all
traffic until a controller pushes the pipeline and routes, e.g. with mltcp.controlplane::

    from mltcp.emulation.switch.mininet_node import MltcpSwitch
    net = Mininet(topo, switch=MltcpSwitch, controller=None)   # addSwitch(..., grpc_port=..., rate=...)
    net.start()
    with connect(net["s1"].grpc_address) as sw: sw.push_pipeline(); sw.install_routes(...)

Hosts need static ARP entries (mltcp.p4 drops non-IPv4 frames), as in the p4lang tutorials.
Switch parameters (``addSwitch(name, cls=MltcpSwitch, **params)``): grpc_port (default: a free
port), device_id (0), rate, delay, buffer, loss, reorder, duplicate, seed, port_config
({port: "rate=...,delay=..."}), log_file (default /tmp/mltcp-switch-<name>.log).
"""

from __future__ import annotations

import subprocess

from mininet.node import Switch

from mltcp import offloads

from .runtime import free_tcp_port, stop_switch, switch_command, wait_grpc


_handed_out: set[int] = set()


def _unused_port() -> int:
    """A free TCP port not given to another switch of this process: the switches of one network
    are all constructed before the first one binds its port, so the kernel may offer one twice."""
    while True:
        port = free_tcp_port()
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class MltcpSwitch(Switch):
    """A Mininet switch backed by the mltcp-switch software target."""

    def __init__(
        self,
        name,
        grpc_port: int | None = None,
        device_id: int = 0,
        rate: str = "unlimited",
        delay: str = "0",
        buffer: int = 100,
        loss: float = 0.0,
        reorder: float = 0.0,
        duplicate: float = 0.0,
        seed: int = 1,
        port_config: dict[int, str] | None = None,
        log_file: str | None = None,
        **params,
    ):
        super().__init__(name, **params)
        self.grpc_port = grpc_port or _unused_port()
        self.device_id = device_id
        self.link_opts = dict(
            rate=rate,
            delay=delay,
            buffer=buffer,
            loss=loss,
            reorder=reorder,
            duplicate=duplicate,
            seed=seed,
            port_config=port_config or {},
        )
        self.log_file = log_file or f"/tmp/mltcp-switch-{name}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def defaultDpid(self, dpid=None):  # no OpenFlow datapath: any stable id will do
        try:
            return super().defaultDpid(dpid)
        except Exception:
            return "0" * 16

    def start(self, _controllers) -> None:
        # ports up; TX checksum offload off on both ends: a veth hands a partial checksum along,
        # which the switch would forward unfinished (the receiver then drops every UDP datagram)
        interfaces = offloads.ready_switch_ports(self)
        cmd = switch_command(
            interfaces, grpc_port=self.grpc_port, device_id=self.device_id, grpc_host="127.0.0.1", **self.link_opts
        )
        log = open(self.log_file, "w")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        log.close()
        wait_grpc(self.grpc_address, 20, self.proc)

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None:
            stop_switch(self.proc, 10)
        self.proc = None
        super().stop(deleteIntfs)


def mininet_switch_class():
    """The class to hand to Mininet (``switch=`` or ``addSwitch(cls=...)``)."""
    return MltcpSwitch
