"""mltcp-switch as a Mininet switch (MltcpSwitch): h1 - s1 - h2, programmed over P4Runtime by
mltcp.controlplane, ping goes through it. Needs root and Mininet."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mltcp.emulation.switch.testbed import have_root_netns

_why = have_root_netns()
if _why is None:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        _why = "mininet is not importable"
pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.skipif(_why is not None, reason=_why or "")]
if _why:
    print(f"test_switch_mininet skipped: {_why}")


def test_ping_through_mltcp_switch_in_mininet(tmp_path):
    pytest.importorskip("mltcp.controlplane.client")
    from mininet.net import Mininet
    from mininet.topo import Topo

    from mltcp.emulation.switch.mininet_node import MltcpSwitch

    p = f"m{os.getpid() % 100000}"

    class Line(Topo):
        def build(self):
            s = self.addSwitch(
                f"{p}s1", cls=MltcpSwitch, rate="100mbit", delay="1ms", log_file=str(tmp_path / "s1.log")
            )
            for i in (1, 2):
                h = self.addHost(f"{p}h{i}", ip=f"10.0.0.{i}/24", mac=f"00:00:00:00:00:0{i}")
                self.addLink(h, s)

    net = Mininet(topo=Line(), controller=None, build=False)
    try:
        net.build()
        net.start()
        h1, h2, s1 = net[f"{p}h1"], net[f"{p}h2"], net[f"{p}s1"]
        h1.setARP(h2.IP(), h2.MAC())
        h2.setARP(h1.IP(), h1.MAC())
        ports = {h: s1.ports[s1.connectionsTo(h)[0][0]] for h in (h1, h2)}
        script = f"""
from mltcp.controlplane.client import connect
from mltcp.controlplane.topology import Route
with connect({s1.grpc_address!r}, device_id=0) as sw:
    sw.push_pipeline()
    sw.install_routes([Route("10.0.0.1/32", {ports[h1]}, "{h1.MAC()}"),
                       Route("10.0.0.2/32", {ports[h2]}, "{h2.MAC()}")])
"""
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.0.2")
        assert " 0% packet loss" in out, out
        # 1 ms propagation delay each way on the switch's egress ports
        rtt = float(out.split("rtt min/avg/max/mdev = ")[1].split("/")[0])
        print(json.dumps({"ping_min_rtt_ms": rtt}))
    finally:
        net.stop()
