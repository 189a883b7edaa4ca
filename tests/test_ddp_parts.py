"""mltcp.ddp without a network: model sizes, the GPU-time profile, the hook, the scenario fields,
and two real DDP ranks over loopback (mltcp.torch.attach on gloo's sockets)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (Debian: python3-torch; pip: mltcp[torch])")

from _ports import free_tcp_port  # noqa: E402
from mltcp import scenario as scn  # noqa: E402
from mltcp.ddp import catalog, hook, models, profile, sockets  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(models.MODELS))
def test_models_have_the_catalogued_real_sizes(name):
    assert models.param_count(models.spec(name).build()) == catalog.MODELS[name].params


def test_real_sizes_are_the_published_ones():
    assert round(catalog.MODELS["resnet50"].params / 1e6, 1) == 25.6
    assert round(catalog.MODELS["vgg16"].params / 1e6) == 138
    assert round(catalog.MODELS["gpt2-small"].params / 1e6) == 124


def test_layer_times_share_the_iteration_by_multiply_adds():
    spec = models.spec("resnet50")
    times = profile.profile_for(spec.build(), spec, 0.3)
    assert sum(t.forward_s + t.backward_s for t in times) == pytest.approx(0.3)
    assert all(t.backward_s == pytest.approx(2 * t.forward_s) for t in times)
    by = {t.name: t for t in times}
    # a 3x3 conv of the first stage does 9x the work of its 1x1 neighbour with the same channels
    assert by["4.conv2"].forward_s == pytest.approx(9 * by["4.conv1"].forward_s, rel=1e-6)


def test_instrumented_model_waits_its_gpu_time_in_forward_and_backward():
    spec = models.spec("tiny")
    net = spec.build()
    clock = profile.GpuClock()
    profile.instrument(net, profile.profile_for(net, spec, 0.3), clock)
    x, y = spec.batch(torch.Generator().manual_seed(0))
    clock.reset()
    t0 = time.perf_counter()
    loss = spec.loss(net(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    assert t1 - t0 >= 0.1 * 0.95 and t2 - t1 >= 0.2 * 0.95
    assert clock.booked_s == pytest.approx(0.3)


def test_hook_records_first_and_last_collective_and_marks_once_per_iteration():
    marks = []
    st = hook.IterationHook(mark=lambda: marks.append(1), clock=iter(range(100)).__next__)
    st.begin()
    cur = st._on_bucket(100)
    st._on_bucket(50)
    st._on_done(cur)
    it = st.end()
    assert (it.start, it.first_collective, it.last_collective_done, it.step_done) == (0, 1, 2, 3)
    assert it.buckets == 2 and it.bytes == 150 and marks == [1]
    st.begin()
    st._on_bucket(10)
    st.end()
    assert marks == [1, 1]


def test_proc_net_tcp_parser_keeps_established_connections():
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7378 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:A3C4 0100007F:7378 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
    )
    assert sockets.parse_proc_net_tcp(text) == {222: (0xA3C4, 0x7378)}


def _ddp_scenario(tmp_path, job_extra: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(
        'name = "t"\niterations = 4\nwarmup_iterations = 1\n[[links]]\nname = "l"\nrate_mbps = 100\n'
        'delay_us = 0\nbuffer_kb = 100\n[[jobs]]\nname = "A"\nworkload = "torch-ddp"\npath = ["l"]\n' + job_extra
    )
    return p


def test_scenario_torch_ddp_job_is_gpu_time_then_the_ring_allreduce(tmp_path):
    sc = scn.load(str(_ddp_scenario(tmp_path, 'model = "resnet50"\nranks = 4\ngpu_ms = 300\nboundary = "mark"\n')))
    j = sc.jobs[0]
    d = j.extra["ddp"]
    assert (d.model, d.ranks, d.gpu_ms, d.boundary) == ("resnet50", 4, 300.0, "mark")
    assert j.compute_s == pytest.approx(0.3)
    assert j.bytes_per_iter == pytest.approx(2 * 3 / 4 * 4 * 25_557_032)
    measured = scn.load(str(_ddp_scenario(tmp_path, 'model = "resnet50"\ngpu_ms = 300\nsim_compute_ms = 450\n')))
    assert measured.jobs[0].compute_s == pytest.approx(0.45)  # the simulator's compute, where measured


@pytest.mark.parametrize(
    "extra, field",
    [
        ('model = "alexnet"\n', "jobs[0].model"),
        ('model = "tiny"\nranks = 1\n', "jobs[0].ranks"),
        ('model = "tiny"\nhosts = ["a1"]\n', "jobs[0].hosts"),
        ('model = "tiny"\nboundary = "sometimes"\n', "jobs[0].boundary"),
        ('model = "tiny"\nbytes = 5\n', "jobs[0].bytes"),
        ('model = "tiny"\nsim_compute_ms = -1\n', "jobs[0].sim_compute_ms"),
    ],
)
def test_bad_torch_ddp_fields_exit_2_naming_file_and_field(tmp_path, extra, field):
    p = _ddp_scenario(tmp_path, extra)
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(p)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert field in r.stderr and "s.toml" in r.stderr


def _emulate_tiny(*opts: str) -> subprocess.CompletedProcess:
    """`mltcp emulate run scenarios/ddp-tiny.toml OPTS` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "run", "scenarios/ddp-tiny.toml", *opts],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


@pytest.mark.parametrize("opt", [["--transport", "udp"], ["--link-mode", "bmv2"], ["--topology", "ring"]])
def test_emulate_options_ddp_jobs_cannot_honour_exit_2(opt):
    r = _emulate_tiny(*opt)
    assert r.returncode == 2, r.stderr
    assert "ddp-tiny.toml" in r.stderr and " ".join(opt) in r.stderr


def test_emulate_pcap_of_a_ddp_run_needs_a_records_folder_exit_2():
    r = _emulate_tiny("--pcap")
    assert r.returncode == 2, r.stderr
    assert "--pcap needs --records" in r.stderr


def test_an_mltcp_table_the_kernel_cannot_take_exits_2_before_any_arm(tmp_path):
    """A torch-ddp scenario's [mltcp] table configures the kernel variants; a key they do not model
    is refused naming the file, the table and the key, before a namespace is made."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "scenarios" / "ddp-tiny.toml").read_text()
    p = tmp_path / "tiny-convex.toml"
    p.write_text(text.replace("[[jobs]]", '[mltcp]\nshape = "convex"\n\n[[jobs]]', 1))
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "run", str(p), "--compare"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert r.returncode == 2, r.stderr
    assert "tiny-convex.toml" in r.stderr and "[mltcp]" in r.stderr and "shape" in r.stderr


def test_two_local_ranks_over_loopback_attach_and_train_identically():
    """examples/ddp_two_ranks.py twice: gloo's sockets on reno, every step recorded in order,
    the same losses both times (fixed seeds)."""

    def run():
        # its own session, so that a hang kills both ranks too (no orphan rank holding the port)
        p = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "ddp_two_ranks.py"), "--cc", "reno", "--steps", "4"]
            + ["--port", str(free_tcp_port())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            pytest.fail(f"the two ranks did not finish in 180 s; stdout: {out[-1500:]}; stderr: {err[-1500:]}")
        assert p.returncode == 0, err[-2000:]
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    first, second = run(), run()
    assert len(first) == 8
    for row in first:
        assert row["cc"] == "reno"
        assert row["start"] <= row["first_collective"] <= row["last_collective_done"] <= row["step_done"]
        assert row["buckets"] >= 1
    key = lambda rows: sorted((r["rank"], r["step"], r["loss"]) for r in rows)
    assert key(first) == key(second)
