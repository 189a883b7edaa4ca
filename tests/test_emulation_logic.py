"""Pure logic of the emulation part: names, tc command lines, scenario mapping, metrics helpers."""

import pytest

from mltcp import scenario as scn
from mltcp.emulation import netns
from mltcp.emulation.baseline import jain_index
from mltcp.emulation.arm import ArmResult
from mltcp.emulation.peers import kernel_cc_name, peer_commands, sender_doc
from mltcp.emulation.plan import (
    EmulationError,
    choose_topology,
    job_plan,
    link_params_of,
    needs_ecn,
    plan_from_scenario,
    rescale,
)
from mltcp.emulation.report import arm_summary
from mltcp.metrics import per_job_avg
from mltcp.emulation.topologies import LinkParams, TopologyError, tc_commands
from mltcp.records import IterationRecord


def _sc(paths, links=("L",), **job):
    d = {
        "name": "t",
        "iterations": 6,
        "warmup_iterations": 1,
        "links": [{"name": n, "rate_mbps": 200, "delay_us": 100, "buffer_kb": 100} for n in links],
        "jobs": [
            dict({"name": f"j{i}", "compute_ms": 10, "bytes": 1_000_000, "path": list(p)}, **job)
            for i, p in enumerate(paths)
        ],
    }
    return scn.from_dict(d, "test.toml")


def test_run_tag_unique_letters_and_short():
    tags = {netns.run_tag(p) for p in range(1, 5000)}
    assert len(tags) == 4999
    assert all(t.isalpha() and len(t) == 5 for t in tags)
    assert netns.run_tag(4194304) != netns.run_tag(4194303)


@pytest.mark.parametrize("kind,jobs", [("dumbbell", 50), ("ring", 3), ("leafspine", 20)])
def test_interface_names_fit_ifnamsiz(kind, jobs):
    from mltcp.emulation.topologies import make_topology

    topo = make_topology(kind, netns.run_prefix(4194303), LinkParams(rate_mbps=10), n_jobs=jobs)
    degree = {}
    for a, b in topo.links():
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    longest = max(len(f"{n}-eth{d}") for n, d in degree.items())
    assert longest <= 15
    assert len(topo.job_pairs) >= min(jobs, 3)


def test_tc_commands_htb_buffer():
    cmds = tc_commands("x-eth1", LinkParams(rate_mbps=100, buffer_bytes=60000), "htb")
    flat = [" ".join(c) for c in cmds]
    assert any("htb" in c and "root" in c for c in flat)
    assert any("rate 100mbit" in c for c in flat)
    assert any("bfifo limit 60000" in c and "parent 5:1" in c for c in flat)
    assert not any("netem" in c or " red " in c for c in flat)


def test_tc_commands_linux_tc_delay_and_ecn():
    flat = [
        " ".join(c)
        for c in tc_commands(
            "d", LinkParams(rate_mbps=50, delay_ms=1, buffer_bytes=90000, ecn_threshold_pkts=20), "linux-tc"
        )
    ]
    red = [c for c in flat if " red " in c]
    assert red and "ecn" in red[0] and "min 30000" in red[0]
    assert any("netem delay 1ms" in c and "parent 6:" in c for c in flat)


def test_tc_commands_unshaped_is_empty_and_bad_mode_raises():
    assert tc_commands("d", LinkParams(), "htb") == []
    with pytest.raises(TopologyError):
        tc_commands("d", LinkParams(rate_mbps=1), "switch")


def test_link_params_validation():
    with pytest.raises(TopologyError, match="rate_mbps"):
        LinkParams(rate_mbps=-1).validate()
    with pytest.raises(TopologyError, match="buffer_bytes"):
        LinkParams(buffer_bytes=10).validate()


def test_choose_topology():
    assert choose_topology(_sc([["L"], ["L"]])) == "dumbbell"
    ring = _sc([["a", "b"], ["b", "c"], ["c", "a"]], links=("a", "b", "c"))
    assert choose_topology(ring) == "ring"
    with pytest.raises(TopologyError, match="path"):
        choose_topology(_sc([["a"], ["b"]], links=("a", "b")))


def test_ring_paths_must_form_the_cycle():
    good = _sc([["a", "b"], ["b", "c"], ["c", "a"]], links=("a", "b", "c"))
    assert plan_from_scenario(good).topology == "ring"
    bad = _sc([["a", "b"], ["c", "a"], ["b", "c"]], links=("a", "b", "c"))
    with pytest.raises(TopologyError, match=r"jobs\[1\]\.path"):
        plan_from_scenario(bad)
    assert plan_from_scenario(scn.load("circular")).topology == "ring"


def test_link_params_of_scenario_link():
    sc = _sc([["L"]])
    p = link_params_of(sc.links["L"])
    assert p.rate_mbps == pytest.approx(200)
    assert p.delay_ms == pytest.approx(0.1)
    assert p.buffer_bytes == 100_000
    assert p.ecn_threshold_pkts is None


def test_rescale_keeps_comm_compute_ratio():
    sc = _sc([["L"], ["L"]])
    small = rescale(sc, rate_mbps=50, delay_ms=2, iterations=4)
    assert sc.links["L"].rate_bps == pytest.approx(200e6)  # original untouched
    assert small.links["L"].rate_bps == pytest.approx(50e6)
    assert small.jobs[0].bytes_per_iter == pytest.approx(250_000)
    assert small.links["L"].buffer_bytes == pytest.approx(25_000)
    assert small.links["L"].delay_s == pytest.approx(0.002)
    assert all(j.iterations == 4 for j in small.jobs)
    assert small.warmup_iterations < 4
    with pytest.raises(ValueError):
        rescale(sc, rate_mbps=0)


def test_rescale_dilate_stretches_time_keeps_bytes():
    sc = _sc([["L"], ["L"]], start_offset_ms=2)
    slow = rescale(sc, rate_mbps=20, dilate=True)  # 200 -> 20 Mb/s: 10x slower
    assert slow.jobs[0].bytes_per_iter == pytest.approx(1_000_000)
    assert slow.links["L"].buffer_bytes == pytest.approx(100_000)
    assert slow.jobs[0].compute_s == pytest.approx(0.1)
    assert slow.jobs[0].start_offset_s == pytest.approx(0.02)
    assert slow.links["L"].delay_s == pytest.approx(0.001)
    assert slow.ideal_iter_s(slow.jobs[0]) == pytest.approx(10 * sc.ideal_iter_s(sc.jobs[0]))


def test_plan_from_scenario():
    plan = plan_from_scenario(_sc([["L"], ["L"]], start_offset_ms=5))
    assert plan.topology == "dumbbell"
    assert [j.spec.bytes_per_iter for j in plan.jobs] == [1_000_000, 1_000_000]
    assert plan.jobs[0].job.start_offset_s == pytest.approx(0.005)


def _placed(**kw):
    return job_plan("j", 1000, 0.1, 0.0, 3, sender="s", receiver="r", dst_ip="10.0.0.2", port=5001, **kw)


def test_peer_commands_kernel_and_tag():
    job = _placed()
    recv, send = peer_commands(job, "kernel", "mabcde")
    assert "mltcp.emulation.kernel_peer" in recv and "recv" in recv
    assert send[send.index("--spec") + 1] == "-"  # the job comes as JSON on stdin
    assert "mabcde" in send and "mabcde" in recv
    doc = sender_doc(job, "kernel", "cubic")
    assert (doc["cc"], doc["host"], doc["port"], doc["t0"]) == ("cubic", "10.0.0.2", 5001, -1.0)
    assert doc["spec"]["job"]["bytes_per_iter"] == 1000 and doc["spec"]["job"]["iterations"] == 3


def test_kernel_cc_name():
    assert kernel_cc_name("reno", False) == "reno"
    assert kernel_cc_name("dctcp", False) == "bpf_dctcp"  # registered by the arm (base_cc)
    with pytest.raises(Exception, match="reno, cubic or dctcp"):
        kernel_cc_name("dcqcn", False)


def _rec(job, it, cs, end):
    return IterationRecord(job, it, cs - 0.1, cs, end, 1.0)


def test_arm_summary_has_simulator_keys_and_honest_marks():
    sc = _sc([["L"], ["L"]])
    recs = [
        _rec(j, i, 1.0 * i + (0.5 if j == "j1" else 0.0), 1.0 * i + (0.9 if j == "j1" else 0.4))
        for j in ("j0", "j1")
        for i in range(6)
    ]
    arm = ArmResult("reno", recs, drops=7, ecn_marks=None, retrans={"j0": 3, "j1": 4}, link_mode="htb", wall_s=1.0)
    d = arm_summary(arm, sc)
    for k in ("cc", "avg_iter_s", "p99_iter_s", "drops", "ecn_marks", "converged_at_iteration"):
        assert k in d
    assert d["ecn_marks"] is None and d["drops"] == 7 and d["retransmissions"] == 7
    assert d["converged_at_iteration"] == 0  # the two jobs never overlap
    assert d["interleaved_at_iteration"] == 0
    assert d["per_job_avg_iter_s"]["j0"] == pytest.approx(0.5)
    assert per_job_avg(recs, 1)["j1"] == pytest.approx(0.5)


def test_interleaved_at_uses_loose_threshold():
    sc = _sc([["L"], ["L"]])
    # period 1.0, 0.55 s phases: from iteration 2 on each phase shares 0.05 s with the other job's
    # phase on either side (18 %), before that they coincide
    recs = []
    for i in range(8):
        shift = 0.0 if i < 2 else 0.5
        recs += [_rec("j0", i, i * 1.0, i * 1.0 + 0.55), _rec("j1", i, i * 1.0 + shift, i * 1.0 + shift + 0.55)]
    d = arm_summary(ArmResult("reno", recs, 0, None, {}, "htb", 1.0), sc)
    assert d["converged_at_iteration"] is None
    assert d["interleaved_at_iteration"] == 2


def test_interleaved_at_tolerates_one_late_hiccup_not_many():
    from mltcp.metrics import interleaved_at

    def run(bad):
        recs = []
        for i in range(20):
            shift = 0.0 if i < 3 or i in bad else 0.5
            recs += [_rec("j0", i, i * 1.0, i * 1.0 + 0.4), _rec("j1", i, i * 1.0 + shift, i * 1.0 + shift + 0.4)]
        return recs

    assert interleaved_at(run(set())) == 3
    assert interleaved_at(run({19})) == 3  # 1 of 17 later iterations overlaps
    assert interleaved_at(run({10, 12, 14, 16, 18})) is None or interleaved_at(run({10, 12, 14, 16, 18})) > 3


def test_peer_commands_udp():
    from mltcp.emulation.peers import udp_available

    if not udp_available():
        pytest.skip("userspace transport not importable")
    job = _placed(line_rate_mbps=100)
    job.spec.job_id = 4
    recv, send = peer_commands(job, "udp", "mabcde")
    assert "mltcp.emulation.udp_peer" in send
    doc = sender_doc(job, "udp", "mltcp-reno")
    assert doc["cc"] == "mltcp-reno" and doc["spec"]["job_id"] == 4


def test_sender_doc_is_what_the_peers_read(tmp_path):
    """The runner's document, through JSON, gives the peer the same JobSpec and settings; a bad
    document stops the peer naming the field."""
    import json

    from mltcp.emulation import kernel_peer, udp_peer
    from mltcp.emulation.peer_io import read_send_doc

    sc = _sc([["L"], ["L"]], jitter=0.05, straggler_prob=0.2, straggler_delay_ms=30)
    plan = plan_from_scenario(sc)
    job = plan.jobs[1]
    job.dst_ip, job.port, job.line_rate_mbps = "10.0.0.4", 5002, 100.0
    for transport, extra in (("udp", udp_peer.UDP_FIELDS), ("kernel", kernel_peer.KERNEL_FIELDS)):
        f = tmp_path / f"{transport}.json"
        f.write_text(json.dumps(sender_doc(job, transport, "reno")))
        spec, opts = read_send_doc(str(f), "peer", extra)
        assert spec.to_dict() == job.spec.to_dict() and (opts["host"], opts["port"], opts["t0"]) == (
            "10.0.0.4",
            5002,
            -1.0,
        )
        assert (spec.compute_times(30) == job.spec.compute_times(30)).all()
    f.write_text(json.dumps(dict(sender_doc(job, "kernel", "reno"), nbytes=5)))
    with pytest.raises(SystemExit, match="unknown field.*nbytes"):
        read_send_doc(str(f), "kernel_peer", kernel_peer.KERNEL_FIELDS)
    d = sender_doc(job, "kernel", "reno")
    del d["port"]
    f.write_text(json.dumps(d))
    with pytest.raises(SystemExit, match="'port' is required"):
        read_send_doc(str(f), "kernel_peer", kernel_peer.KERNEL_FIELDS)
    d = sender_doc(job, "udp", "reno")
    d["spec"]["job"]["bytes_per_iter"] = -3
    f.write_text(json.dumps(d))
    with pytest.raises(SystemExit, match="bytes_per_iter must be >= 0"):
        read_send_doc(str(f), "udp_peer", udp_peer.UDP_FIELDS)


def test_jain_index():
    assert jain_index([10, 10]) == pytest.approx(1.0)
    assert jain_index([10, 0]) == pytest.approx(0.5)
    assert 0.5 < jain_index([10, 5]) < 1.0
    with pytest.raises(ValueError):
        jain_index([])


# -- the emulated experiment is the simulator's: RTO, idle restart, NIC rate, payload rate, topology


def test_plan_carries_scenario_rto_and_idle_restart_stretched_by_dilation():
    sc = _sc([["L"], ["L"]])
    assert plan_from_scenario(sc).jobs[0].min_rto_s == pytest.approx(sc.min_rto_s)
    slow = rescale(sc, rate_mbps=20, dilate=True)  # 200 -> 20 Mb/s: every duration x10
    plan = plan_from_scenario(slow)
    assert plan.jobs[0].min_rto_s == pytest.approx(10 * sc.min_rto_s)
    assert all(j.idle_restart == sc.slow_start_after_idle for j in plan.jobs)


def test_udp_sender_doc_passes_rto_idle_restart_and_nic_rate():
    from mltcp.emulation.plan import nic_rate_mbps

    job = _placed(line_rate_mbps=100.0, min_rto_s=2.0, idle_restart=False)
    doc = sender_doc(job, "udp", "mltcp-reno")
    assert doc["min_rto_s"] == 2.0 and doc["idle_restart"] is False
    nic = doc["nic_rate_mbps"]
    assert nic == pytest.approx(nic_rate_mbps(100.0))
    assert nic < 100.0 and nic * 1514 / 1500 == pytest.approx(100.0)  # datagrams fill the link's frames
    job.idle_restart, job.line_rate_mbps = True, 0.0
    doc = sender_doc(job, "udp", "reno")
    assert doc["idle_restart"] is True and "nic_rate_mbps" not in doc


def test_payload_rate_scales_links_by_header_overhead():
    from mltcp.emulation.plan import payload_rate_plan, wire_factor
    from mltcp.traffic.transport import wire

    assert wire_factor("udp") == pytest.approx(1498 / 1400)  # full-sized datagram with its MAC
    assert wire.DEFAULT_PAYLOAD == 1400
    assert wire_factor("kernel") == pytest.approx(1514 / 1448)
    plan = plan_from_scenario(_sc([["L"], ["L"]]))
    payload_rate_plan(plan, "udp")
    assert plan.bottleneck.rate_mbps == pytest.approx(200 * wire_factor("udp"), rel=1e-4)
    assert any("payload" in n for n in plan.notes)
    plan = plan_from_scenario(_sc([["L"], ["L"]]))
    plan.bottleneck = LinkParams()  # unshaped: nothing to scale
    payload_rate_plan(plan, "udp")
    assert plan.bottleneck.rate_mbps is None


def test_switch_dumbbell_has_one_userspace_switch_and_return_delay():
    from mininet.node import Switch

    from mltcp.emulation.topologies import _FloodBridge, make_topology

    class FakeP4(Switch):
        pass

    bn = LinkParams(rate_mbps=100, delay_ms=1.0, buffer_bytes=50_000)
    t = make_topology("dumbbell", "mtest", bn, n_jobs=2, switch_cls=FakeP4)
    classes = {s: t.nodeInfo(s).get("cls") for s in t.switches()}
    assert classes == {"mtests1": FakeP4, "mtests2": _FloodBridge}
    for a, _ in t.job_pairs:  # sender ports: the return direction's delay only
        assert t.link_params[frozenset((a, "mtests1"))] == LinkParams(delay_ms=1.0)
    assert t.link_params[frozenset(("mtests1", "mtests2"))] == bn
    plain = make_topology("dumbbell", "mtest", bn, n_jobs=2)  # bridges/htb: both sides alike
    assert not any(frozenset((a, "mtests1")) in plain.link_params for a, _ in plain.job_pairs)
    assert all(plain.nodeInfo(s).get("cls") is not _FloodBridge for s in plain.switches())


def test_route_rto_commands_for_kernel_tcp():
    from mltcp.emulation.peers import route_rto_commands

    shown = (
        "10.0.0.0/24 dev ma1-eth0 proto kernel scope link src 10.0.0.1 linkdown\n"
        "default via 10.1.1.254 dev h-eth0 rto_min 300ms\n"
        "broadcast 10.0.0.255 dev x table local\n"
    )
    cmds = route_rto_commands(shown, 2.0)
    assert cmds == [
        "ip route change 10.0.0.0/24 dev ma1-eth0 proto kernel scope link src 10.0.0.1 rto_min 2000ms",
        "ip route change default via 10.1.1.254 dev h-eth0 rto_min 2000ms",
    ]
    assert route_rto_commands("", 0.2) == []


def test_calibrated_delay_takes_the_hosts_rtt_off_every_link_traversal():
    from mltcp.emulation.calibrate import calibrated_delay_ms

    assert calibrated_delay_ms(1.0, 1.8, hops=1) == pytest.approx(0.1)  # 2 x 0.1 + 1.8 = 2.0 ms
    assert calibrated_delay_ms(1.0, 1.8, hops=2) == pytest.approx(0.55)  # 4 x 0.55 + 1.8 = 4.0 ms
    assert calibrated_delay_ms(0.5, 3.0, hops=1) == 0.0  # hosts alone exceed it
    with pytest.raises(ValueError):
        calibrated_delay_ms(1.0, 1.0, hops=0)


def test_calibrate_rtt_lowers_the_plans_delay_and_says_so(monkeypatch):
    import mltcp.emulation.calibrate as calibrate

    plan = plan_from_scenario(_sc([["L"], ["L"]]))
    plan.bottleneck = LinkParams(rate_mbps=100, delay_ms=1.0, buffer_bytes=50_000)
    monkeypatch.setattr(calibrate, "measure_host_rtt", lambda p, t, m: {"host_rtt_ms": 1.6, "wall_s": 1.0})
    cal = calibrate.calibrate_rtt(plan, "udp", "switch")
    assert plan.bottleneck.delay_ms == pytest.approx(0.2)
    assert cal["scenario_rtt_ms"] == 2.0 and cal["link_delay_ms"] == pytest.approx(0.2)
    assert any("RTT calibration" in n for n in plan.notes)
    # nothing to calibrate: kernel endpoints, a link mode without delay, no delay
    for transport, mode in (("kernel", "switch"), ("udp", "htb")):
        p = plan_from_scenario(_sc([["L"], ["L"]]))
        p.bottleneck = LinkParams(rate_mbps=100, delay_ms=1.0)
        assert calibrate.calibrate_rtt(p, transport, mode) is None and p.bottleneck.delay_ms == 1.0


def test_plan_and_sender_doc_carry_jitter_and_stragglers_to_both_peers():
    sc = _sc([["L"], ["L"]], jitter=0.05, straggler_prob=0.2, straggler_delay_ms=30)
    plan = plan_from_scenario(sc)
    assert [(j.job.jitter, j.job.straggler_prob) for j in plan.jobs] == [(0.05, 0.2), (0.05, 0.2)]
    assert plan.jobs[0].job.straggler_delay_s == pytest.approx(0.03)
    assert plan.jobs[0].spec.seed != plan.jobs[1].spec.seed  # jobs draw independently
    for transport in ("udp", "kernel"):
        job = sender_doc(plan.jobs[0], transport, "reno")["spec"]["job"]
        assert job["jitter"] == 0.05 and job["straggler_delay_s"] == pytest.approx(0.03)


def test_peers_run_iterations_through_the_driver_with_stragglers(capsys):
    import json

    from mltcp.emulation.peer_io import run_iterations

    class Fake:
        retransmits = 0

        def send_iteration(self, nbytes, it):
            self.retransmits += 2

    import time
    from mltcp.traffic.driver import JobSpec

    spec = JobSpec.of(0, 0.01, 1000, seed=1, name="j", iterations=3, straggler_prob=1.0, straggler_delay_s=0.02)
    run_iterations(Fake(), spec, time.time())
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["iteration"] for r in recs] == [0, 1, 2] and all(r["type"] == "iter" for r in recs)
    assert all(r["comm_start"] - r["start"] >= 0.029 for r in recs)  # 10 ms compute + 20 ms straggling
    assert all(r["drops"] == 2 for r in recs)  # per-iteration retransmissions


def _walk(topo, src_host, dst_host):
    """The switches a packet from src_host to dst_host crosses, following next_hops_to_host
    (the first next hop where there are several)."""
    sw, path = topo.switch_of(src_host), []
    while True:
        path.append(sw)
        hops = topo.next_hops_to_host(sw, dst_host)
        if not hops:
            return path
        assert len(path) < 10, path
        sw = hops[0]


def test_ring_data_goes_round_one_way_and_acks_come_back_along_it():
    from mltcp.emulation.topologies import make_topology

    t = make_topology("ring", "mtest", LinkParams(rate_mbps=10), n_jobs=3)
    r = t.routers
    data_on: dict[tuple, set] = {}  # directed link -> jobs whose data crosses it
    ack_links = set()
    for k, (s, rx) in enumerate(t.job_pairs):
        fwd, back = _walk(t, s, rx), _walk(t, rx, s)
        assert fwd == [r[k], r[(k + 1) % 3], r[(k + 2) % 3]]  # job k: links k and k+1
        assert back == fwd[::-1]  # its ACKs: the same links backwards
        for a, b in zip(fwd, fwd[1:]):
            data_on.setdefault((a, b), set()).add(k)
        ack_links |= set(zip(back, back[1:]))
    # every directed ring link r_i -> r_i+1 carries the data of two jobs: the circular dependency
    assert sorted(map(len, data_on.values())) == [2, 2, 2] and len(data_on) == 3
    assert not ack_links & set(data_on)  # ACKs never queue behind data


def test_leafspine_next_hops_are_both_spines_and_the_switch_picks_one_per_host():
    from mltcp.emulation.softswitch import ecmp_pick
    from mltcp.emulation.topologies import make_topology

    t = make_topology("leafspine", "mtest", LinkParams(rate_mbps=10), n_jobs=8)
    spines = sorted(s for s in t.switches() if s.startswith("mtestp"))
    picks = set()
    for s, rx in t.job_pairs:
        hops = t.next_hops_to_host(t.switch_of(s), rx)
        assert sorted(hops) == spines  # ECMP: both spines
        assert ecmp_pick(hops, t.ip_of(rx)) == ecmp_pick(list(reversed(hops)), t.ip_of(rx))
        picks.add(ecmp_pick(hops, t.ip_of(rx)))
        assert len(_walk(t, s, rx)) == 3  # leaf, spine, leaf
    assert picks == set(spines)  # 8 destinations use both spines


def test_dumbbell_hosts_know_their_switch():
    from mltcp.emulation.topologies import make_topology

    t = make_topology("dumbbell", "mtest", LinkParams(rate_mbps=10), n_jobs=2)
    a, b = t.job_pairs[0]
    assert t.switch_of(a) == "mtests1" and t.switch_of(b) == "mtests2"
    assert _walk(t, a, b) == ["mtests1", "mtests2"] and _walk(t, b, a) == ["mtests2", "mtests1"]
    with pytest.raises(TopologyError, match="not attached"):
        t.switch_of("nobody")


def test_auto_link_mode_uses_the_switch_where_it_helps():
    from mltcp.emulation.plan import needs_ecn
    from mltcp.emulation.network import _controlplane_available, resolve_link_mode, software_switch_class

    if software_switch_class() is None or not _controlplane_available():
        pytest.skip("software switch or control plane not importable")
    assert resolve_link_mode("auto", "dumbbell") == "switch"
    assert resolve_link_mode("auto", "ring") == "htb"  # kernel routers: less RTT added
    assert resolve_link_mode("auto", "ring", ecn=True) == "switch"  # htb cannot mark
    assert resolve_link_mode("switch", "leafspine") == "switch"
    with pytest.raises(TopologyError, match="unknown link mode"):
        resolve_link_mode("warp", "ring")
    assert not needs_ecn(scn.load("circular"), "reno")
    assert needs_ecn(scn.load("circular"), "dcqcn") and needs_ecn(scn.load("dcqcn-two-jobs"))


@pytest.mark.parametrize(
    "name, field", [("ring-allreduce", "flows = "), ("resnet50-pair", "flows = "), ("fat-tree-10k", "")]
)
def test_emulation_refuses_what_it_would_run_wrongly(name, field):
    """Multi-flow jobs, collectives, trace compute times and fabrics run in the simulator only:
    the emulation (one flow per job) refuses them instead of emulating something else."""
    from mltcp.emulation.plan import check_emulatable, plan_from_scenario

    sc = scn.load(name)
    with pytest.raises(TopologyError, match=f"{field}.*simulate` only") as e:
        check_emulatable(sc)
    assert str(sc.source) in str(e.value)
    with pytest.raises(TopologyError):
        plan_from_scenario(sc)
    check_emulatable(scn.load("two-jobs"))  # one flow per job: fine


def test_emulate_cli_refuses_a_multi_flow_scenario_with_exit_2():
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "run", "ring-allreduce", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "ring-allreduce.toml" in p.stderr and "jobs[0]" in p.stderr and "flows = " in p.stderr
    assert p.stdout == ""


def test_regime_notes_name_the_threshold_buffer_and_bdp_mismatches():
    from mltcp.emulation.report import regime_notes

    # innet-ecn-reno-two-jobs at --rate-mbps 100 without --dilate: buffer 5 kB (3 packets), K = 2,
    # scenario RTT 0.1 ms; hosts adding 3.4 ms make the BDP 29 packets > K
    small = LinkParams(rate_mbps=100.0, buffer_bytes=5000, ecn_threshold_pkts=2)
    notes = regime_notes(small, 1448, 0.1, 3.4)
    assert len(notes) == 1 and "bandwidth-delay product is 29 packets" in notes[0]
    assert (
        "drops before it marks"
        in regime_notes(LinkParams(rate_mbps=100.0, buffer_bytes=4500, ecn_threshold_pkts=3), 1448, 0.1, None)[0]
    )
    # --rate-mbps 25 --dilate: buffer 50 kB (33 packets), K = 20, scenario RTT 4 ms, hosts' 6.2 ms: BDP 13
    assert regime_notes(LinkParams(rate_mbps=25.0, buffer_bytes=50000, ecn_threshold_pkts=20), 1448, 4.0, 6.2) == []
    # no ECN, or a scenario whose own BDP is already above K: nothing to say
    assert regime_notes(LinkParams(rate_mbps=100.0, buffer_bytes=5000), 1448, 0.1, 3.4) == []
    assert regime_notes(LinkParams(rate_mbps=100.0, buffer_bytes=500000, ecn_threshold_pkts=5), 1448, 4.0, 6.0) == []


def test_host_rtt_calibration_paces_its_sender_below_the_link_rate(monkeypatch):
    """Paced at the link rate the calibration flow keeps its own queue, which the median RTT would
    count as the hosts' (docs/in-network.md): the calibration job's NIC runs at CALIBRATION_PACE."""
    import mltcp.emulation.calibrate as calibrate
    from mltcp.emulation.plan import assign_endpoints
    from mltcp.emulation.topologies import make_topology

    plan = plan_from_scenario(_sc([["L"], ["L"]]))
    plan.bottleneck = LinkParams(rate_mbps=100, delay_ms=1.0, buffer_bytes=50_000)
    seen = {}

    def fake_arm(p, cc, transport, mltcp, link_mode):
        assign_endpoints(p, make_topology("dumbbell", "t", p.bottleneck, n_jobs=1))
        seen["rates"] = [j.line_rate_mbps for j in p.jobs]
        return ArmResult(
            cc,
            [],
            0,
            None,
            {},
            link_mode,
            1.0,
            peer_stats={p.jobs[0].name: [{"rtt_ms": {"p10": 1.0, "p50": 1.2, "p90": 2.0}}]},
        )

    monkeypatch.setattr(calibrate, "run_arm", fake_arm)
    got = calibrate.measure_host_rtt(plan, "udp", "switch")
    assert got["host_rtt_ms"] == 1.2
    assert 0 < calibrate.CALIBRATION_PACE < 1
    assert seen["rates"] == [pytest.approx(100 * calibrate.CALIBRATION_PACE)]
    assign_endpoints(plan, make_topology("dumbbell", "t", plan.bottleneck, n_jobs=2))
    assert [j.line_rate_mbps for j in plan.jobs] == [100, 100]  # the measured arms: the link's rate


def test_udp_sender_gets_the_scenario_s_mltcp_table_and_builds_that_hook(tmp_path):
    """tuned/dcqcn-two-jobs' [mltcp] table reaches the userspace sender (F on R_HAI, the stage
    thresholds and the timer, not R_AI); the tracker's own knobs stay the sender's (it marks each
    iteration itself), and a base algorithm's document carries no hook settings."""
    import json

    from mltcp.emulation import udp_peer
    from mltcp.emulation.peer_io import read_send_doc
    from mltcp.traffic.transport.sender import build_cc

    sc = scn.load("tuned/dcqcn-two-jobs")
    sc.mltcp_params["min_idle"] = 0.5
    job = plan_from_scenario(sc).jobs[0]
    job.dst_ip, job.port, job.line_rate_mbps = "10.0.0.4", 5002, 100.0
    doc = sender_doc(job, "udp", "mltcp-dcqcn")
    want = {
        "slope": 25.4,
        "intercept": 0.91,
        "dcqcn_f_rai": False,
        "dcqcn_f_rhai": True,
        "dcqcn_f_steps": True,
        "dcqcn_f_timer": True,
    }
    assert {k: v for k, v in doc["cc_params"].items() if k in want or k in ("min_idle",)} == want
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    _, opts = read_send_doc(str(f), "udp_peer", udp_peer.UDP_FIELDS)
    cc = build_cc("mltcp-dcqcn", line_rate=100e6 / 8, **opts["cc_params"])
    assert (cc.slope, cc.dcqcn_f_rai, cc.dcqcn_f_timer, cc.boundary) == (25.4, False, True, "mark")
    assert cc.idle_rule_min() == float("inf")  # the sender marks iterations: the idle rule is off
    base = sender_doc(job, "udp", "dcqcn")["cc_params"]  # the base gets DCQCN's table only
    assert base == {
        "g": 1 / 256,
        "rai": 50e6 / 8,
        "rhai": 100e6 / 8,
        "min_rate": 100e6 / 8,
        "timer": 900e-6,
        "byte_counter": 10e6,
        "alpha_interval": 1e-6,
    }
    assert all(doc["cc_params"][k] == v for k, v in base.items())
    assert "cc_params" not in sender_doc(
        plan_from_scenario(scn.load("holdout-two-jobs-100m")).jobs[0], "udp", "mltcp-cubic"
    )


def test_dilation_slows_dcqcn_s_rates_and_stretches_its_timers():
    """--dilate x100 (10 Gb/s -> 100 Mb/s): R_AI, R_HAI and the floor / 100, the timer and the alpha
    interval x 100, bytes unchanged; the [mltcp] idle minimum stretches like every other time."""
    sc = scn.load("dcqcn-two-jobs")
    sc.mltcp_params["min_idle"] = 1e-3
    slow = rescale(sc, rate_mbps=100, dilate=True)
    assert slow.cc_params["dcqcn"] == pytest.approx(
        {
            "g": 1 / 256,
            "rai_mbps": 0.5,
            "rhai_mbps": 1.0,
            "min_rate_mbps": 1.0,
            "timer_us": 90_000,
            "byte_counter_kb": 10_000,
            "alpha_interval_us": 100,
        }
    )
    assert slow.mltcp_params["min_idle"] == pytest.approx(0.1)
    assert sc.cc_params["dcqcn"]["rai_mbps"] == 50 and sc.mltcp_params["min_idle"] == 1e-3  # the original is untouched
    assert plan_from_scenario(slow).jobs[0].dcqcn["timer"] == pytest.approx(0.09)
    plain = scn.load("dcqcn-two-jobs")
    plain.cc_params.pop("dcqcn")  # defaults are dilated too
    assert rescale(plain, rate_mbps=100, dilate=True).cc_params["dcqcn"]["rai_mbps"] == pytest.approx(0.5)
    cub = rescale(scn.load("cubic-two-jobs"), rate_mbps=100, dilate=True)  # x10: ready for --cc dcqcn
    assert cub.cc_params["dcqcn"]["timer_us"] == pytest.approx(9000) and cub.cc_params["cubic"] == {}


def _planned_jobs(receivers):
    from mltcp.emulation.plan import PORT_BASE

    jobs = plan_from_scenario(scn.load("innet-ecn-reno-two-jobs")).jobs
    for i, (j, r) in enumerate(zip(jobs, receivers)):
        j.receiver, j.port = r, PORT_BASE + i
    return jobs


@pytest.mark.parametrize("mode", ["switch", "bmv2"])
def test_p4_link_modes_send_jobs_to_the_shim_port(mode):
    """mltcp.p4 parses the shim on UDP 9199 only: in both P4 link modes the jobs go there, or a
    switch_policy would see no band (mltcp-switch ran its policy on nothing before this)."""
    from mltcp.emulation.arm import shim_ports
    from mltcp.traffic.transport.wire import MLTCP_UDP_PORT

    sc = scn.load("innet-ecn-reno-two-jobs")
    jobs = _planned_jobs(["r1", "r2"])
    shim_ports(jobs, mode, "udp", sc.switch)
    assert [j.port for j in jobs] == [MLTCP_UDP_PORT, MLTCP_UDP_PORT]


def test_shim_port_left_alone_off_p4_and_refused_for_a_policy_it_cannot_serve():
    from mltcp.emulation.arm import shim_ports
    from mltcp.emulation.plan import PORT_BASE, EmulationError

    sc = scn.load("innet-ecn-reno-two-jobs")
    jobs = _planned_jobs(["r1", "r2"])
    shim_ports(jobs, "htb", "udp", sc.switch)
    assert [j.port for j in jobs] == [PORT_BASE, PORT_BASE + 1]
    shared = _planned_jobs(["r1", "r1"])
    with pytest.raises(EmulationError, match="9199"):
        shim_ports(shared, "switch", "udp", sc.switch)
    off = _planned_jobs(["r1", "r1"])
    shim_ports(off, "switch", "udp", None)  # no policy: the ports stay (nothing to act on)
    assert [j.port for j in off] == [PORT_BASE, PORT_BASE + 1]


def test_the_switch_policy_reaches_the_switch_with_all_its_fields():
    """What softswitch.switch_tables hands the programming step reads back as the same policy
    (priority-by-progress's priority_ecn / priority_buffer included: without them the switch
    would get by-band marking, which v1model cannot do)."""
    from mltcp.emulation.softswitch import policy_spec
    from mltcp.progress_policy import from_table

    for name, table in (
        ("ecn-by-progress", {"bands": 4, "ecn_scale_lo": 0.5}),
        ("priority-by-progress", {"bands": 8, "priority_ecn": "link"}),
        (
            "priority-by-progress",
            {"bands": 4, "priority_ecn": "off", "priority_buffer": "shared", "priority_pin": False},
        ),
    ):
        pol = from_table(name, table)
        spec = dict(policy_spec(pol))
        assert from_table(spec.pop("name"), spec) == pol


def test_priority_by_progress_is_refused_on_bmv2_before_any_network():
    from mltcp.emulation.plan import EmulationError
    from mltcp.emulation.runner import run_experiment

    sc = scn.load("innet-dcqcn-two-jobs")
    with pytest.raises(EmulationError, match="not emulated on BMv2"):
        run_experiment(sc, "dcqcn", transport="udp", link_mode="bmv2", with_sim=False)


def test_dctcp_has_no_kernel_mltcp_variant_but_runs_on_both_transports():
    from mltcp.emulation.plan import BASE_CCS
    from mltcp.emulation.runner import run_experiment

    sc = _sc([["L"], ["L"]])
    assert "dctcp" in BASE_CCS  # udp: the core's Dctcp and MLTCPDctcp; kernel: bpf_dctcp
    with pytest.raises(EmulationError, match="no MLTCP variant of dctcp.*--transport udp"):
        run_experiment(sc, "dctcp", compare_mltcp=True, transport="kernel", link_mode="switch", with_sim=False)
    with pytest.raises(EmulationError, match="MLTCP variants of reno and cubic only, not of dctcp"):
        kernel_cc_name("dctcp", True)
    assert needs_ecn(sc, "dctcp") and not needs_ecn(sc, "reno")


def test_udp_sender_doc_carries_dctcp_params_and_the_peer_builds_dctcp():
    from mltcp.cc import Dctcp, MLTCPDctcp, make_cc

    job = _placed(line_rate_mbps=100.0)
    job.dctcp = {"g": 0.125}
    job.hook = {"slope": 2.0, "min_idle": 0.5}
    doc = sender_doc(job, "udp", "mltcp-dctcp")
    assert doc["cc_params"] == {"g": 0.125, "slope": 2.0}  # the tracker's knobs stay the sender's
    cc = make_cc(doc["cc"], **doc["cc_params"])
    assert isinstance(cc, MLTCPDctcp) and isinstance(cc, Dctcp) and cc.g == 0.125 and cc.slope == 2.0
    assert "cc_params" not in sender_doc(job, "udp", "reno")
    assert sender_doc(job, "udp", "dctcp")["cc_params"] == {"g": 0.125}


def test_lossless_runs_only_on_mltcp_switch_with_userspace_senders():
    """A scenario's pfc links: mltcp-switch sends PFC frames and the udp senders obey them on
    their interface (RACK's window = the RTO: a lossless fabric loses nothing, unpinned priority
    queues reorder); kernel TCP and BMv2 have no PFC, and the plan says so."""
    from types import SimpleNamespace

    from mltcp.emulation.arm import lossless, lossless_doc

    p = plan_from_scenario(scn.load("innet-dcqcn-two-jobs"))
    assert lossless(p, "switch", "udp")
    assert not lossless(p, "bmv2", "udp") and not lossless(p, "switch", "kernel")
    assert not lossless(plan_from_scenario(scn.load("two-jobs")), "switch", "udp")
    assert any("lossless (pfc)" in n and "mltcp-switch" in n for n in p.notes)
    node = SimpleNamespace(defaultIntf=lambda: SimpleNamespace(name="m-a1-eth0"))
    doc = lossless_doc({"cc": "dcqcn"}, p.jobs[0], node)
    assert doc == {"cc": "dcqcn", "pfc_ifname": "m-a1-eth0", "reo_wnd_s": p.jobs[0].min_rto_s}


def test_switch_ports_get_the_lossless_and_unpinned_settings(monkeypatch):
    from types import SimpleNamespace

    from mltcp.emulation import softswitch
    from mltcp.emulation.topologies import LinkParams
    from mltcp.progress_policy import from_table

    ports = [
        (SimpleNamespace(link_params=LinkParams(rate_mbps=25, buffer_bytes=4_000_000)), 1),
        (SimpleNamespace(link_params=LinkParams(rate_mbps=25, buffer_bytes=45_000)), 2),
    ]
    monkeypatch.setattr(softswitch, "_linked_ports", lambda sw: ports)
    topo = SimpleNamespace(
        pfc_headroom=64,
        switch_policy=from_table("priority-by-progress", {"bands": 8, "priority_ecn": "off", "priority_pin": False}),
    )
    cfg = softswitch.port_config(None, topo)
    assert cfg[1].endswith(",pfc=64,pin=0") and cfg[2].endswith("buffer=30,pin=0")  # 30 packets: no room for 64
    assert "pfc" not in softswitch.port_config(None)[1]


def test_a_peers_error_message_keeps_the_cause_above_a_traceback():
    from mltcp.emulation.peers import Peer

    p = Peer.__new__(Peer)  # only its stderr lines
    p.err = [
        "Traceback (most recent call last):",
        "RuntimeError: [pair.cc:598] Connection reset by peer",
        "x",
        "At:",
        "  hook.py(91): done",
        "",
    ]
    assert p.why() == "RuntimeError: [pair.cc:598] Connection reset by peer | At: |   hook.py(91): done | "
    p.err = ["warning", "OSError: gone"]
    assert p.why() == "warning | OSError: gone"
