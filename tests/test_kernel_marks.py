"""Iteration marks from applications, map lookup without bpftool, and NIC-rate pacing of kernel
TCP sockets. The root parts register the BPF congestion controls (helper 'kernel' only)."""

import json
import socket
import subprocess
import sys
import time

import pytest

from mltcp.traffic.kernel import bpfsys, loader, maps
from mltcp.traffic.kernel.transport import (
    SO_MAX_PACING_RATE,
    KernelTransport,
    Receiver,
    pacing_rate_for_link,
    set_pacing,
)
from _kernel_prereq import missing

REASON = missing()
if REASON:
    print(f"test_kernel_marks: skipping root tests: {REASON}")
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_pacing_rate_for_link_counts_frames():
    # A 1514-byte frame carries 1448 payload bytes; the kernel paces payload.
    assert pacing_rate_for_link(1514.0) == pytest.approx(1448.0)
    assert pacing_rate_for_link(100.0) < 100.0


def test_set_pacing_sets_the_socket_limit_and_rejects_nonsense():
    s = socket.socket()
    try:
        set_pacing(s, 100.0)
        assert s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) == 12_500_000
        with pytest.raises(ValueError, match="pacing"):
            set_pacing(s, 0.0)
    finally:
        s.close()


def _doc(port: int, cc: str, iterations: int, nbytes: int, compute_s: float = 0.0, mark: bool = True) -> str:
    from mltcp.traffic.driver import JobSpec

    spec = JobSpec.of(0, compute_s, nbytes, iterations=iterations)
    return json.dumps({"spec": spec.to_dict(), "host": "127.0.0.1", "port": port, "cc": cc, "mark": mark}) + "\n"


def test_kernel_peer_rejects_mark_with_a_base_cc():
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.emulation.kernel_peer", "send"],
        input=_doc(9, "reno", 1, 10),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "mark needs an MLTCP congestion control" in r.stderr


@pytest.fixture(scope="module")
def loaded():
    before = list(loader.registered())
    try:
        yield loader.load(["mltcp_reno"], config=maps.Config(min_idle=0.02))
    finally:
        loader.unload(["mltcp_reno"])
        if "mltcp_reno" in before:
            loader.load(["mltcp_reno"])


@pytest.mark.root
@needs_root
def test_map_walk_finds_what_bpftool_lists(loaded):
    mine = maps.find_maps("mltcp_reno")
    listed = {m["id"]: m for m in maps._bpftool_json("map", "show") if m.get("name", "").startswith("mreno_")}
    assert {m["id"] for m in mine.values()} <= set(listed)
    for short, m in mine.items():
        assert listed[m["id"]]["name"] == "mreno_" + short
        assert listed[m["id"]]["bytes_value"] == m["bytes_value"]
    assert set(mine) >= {"cfg", "pcfg", "state", "mark", "trace", "tcount", "stats"}
    assert bpfsys.map_ids() == sorted(bpfsys.map_ids())


@pytest.mark.root
@needs_root
def test_mark_iteration_start_keeps_the_maps_open_and_follows_a_reload(loaded):
    port = 40000 + (time.monotonic_ns() // 1000) % 20000
    assert maps.mark_iteration_start(port) == 1
    for _ in range(9):
        maps.mark_iteration_start(port, ["mltcp_reno"])
    with maps.VariantMaps("mltcp_reno") as vm:
        assert vm.marks()[port] == 10
    cached = maps._cached("mltcp_reno")
    assert cached.current()  # nothing newer loaded
    # A reload gives new maps, with higher ids: after the revalidation interval the marks go to them.
    loader.load(["mltcp_reno"], config=maps.Config(min_idle=0.02))
    assert not cached.current()
    maps.mark_iteration_start(port)
    with maps.VariantMaps("mltcp_reno") as vm:
        assert vm.marks().get(port) == 1


@pytest.mark.root
@needs_root
@pytest.mark.integration
def test_kernel_peer_marks_every_iteration():
    """kernel_peer send --mark, over loopback with mltcp_reno: one mark per iteration in the
    mark map under the sender's port, and the BPF tracker sees each iteration (no idle gap long
    enough: min_idle 100 s) only through those marks."""
    before = list(loader.registered())
    loader.load(["mltcp_reno"], config=maps.Config(min_idle=100.0))
    recv = send = None
    try:
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        port = ls.getsockname()[1]
        ls.close()
        peer = [sys.executable, "-m", "mltcp.emulation.kernel_peer"]
        recv = subprocess.Popen([*peer, "recv", "--port", str(port)], stdout=subprocess.PIPE, text=True)
        assert '"listening"' in recv.stdout.readline()
        with maps.VariantMaps("mltcp_reno") as vm:
            old = vm.marks()
            send = subprocess.run(
                [*peer, "send"],
                input=_doc(port, "mltcp_reno", 4, 200_000, 0.01),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert send.returncode == 0, send.stderr
            new = {p: g for p, g in vm.marks().items() if old.get(p) != g}
        assert list(new.values()) == [4]
        assert send.stdout.count('"type": "iter"') == 4
    finally:
        if recv:
            recv.wait(timeout=10)
        loader.unload(["mltcp_reno"])
        if "mltcp_reno" in before:
            loader.load(["mltcp_reno"])


@pytest.mark.root
@needs_root
@pytest.mark.integration
def test_a_paced_socket_is_not_faster_than_its_pace():
    rx = Receiver("127.0.0.1", 0)
    tr = None
    try:
        tr = KernelTransport("127.0.0.1", rx.port, cc="reno", pacing_mbit=20.0)
        st = tr.send_iteration(2_000_000, 0)
    finally:
        if tr:
            tr.close()
        rx.close()
    # 2 MB at 20 Mbit/s takes 0.8 s; unpaced loopback moves it in milliseconds. The first
    # window (10 segments of loopback's 64 kB MSS) may leave before the pacer has a rate, so the
    # bound is half the paced time (a run measured 0.30 s for 1 MB: 75 % of its 0.4 s).
    assert st.end - st.start > 0.4
