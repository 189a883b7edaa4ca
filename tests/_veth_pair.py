"""Two network namespaces joined by a veth, for the root kernel tests: ``tx`` (st0, 10.77.0.1) and
``rx`` (st1, 10.77.0.2), named by their files under /run/netns; removed even when the test fails."""

import subprocess
import uuid

import pytest


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veth_pair():
    """Namespaces tx and rx joined by a veth (10.77.0.1 -> 10.77.0.2); removed even on failure."""
    tag = uuid.uuid4().hex[:6]
    tx, rx = f"mlst{tag}a", f"mlst{tag}b"
    made = []
    try:
        for ns in (tx, rx):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", "st0", "netns", tx, "type", "veth", "peer", "name", "st1", "netns", rx)
        for ns, dev, addr in ((tx, "st0", "10.77.0.1/24"), (rx, "st1", "10.77.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield f"/run/netns/{tx}", f"/run/netns/{rx}"
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
