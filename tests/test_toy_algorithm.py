"""A congestion control added as one file (tests/cc_toy/aimd.py, found through MLTCP_CC_PATH) is
picked up by the registry, the simulator's dispatch, the scenario loader, the userspace senders'
make_cc and the MLTCP variants, and simulates end to end. Runs in a fresh process (the registry
is read at import); the first run compiles the loop for the new registry (a minute or two)."""

import json
import os
import subprocess
import sys
from pathlib import Path

TOY_DIR = Path(__file__).resolve().parent / "cc_toy"

SCRIPT = r"""
import json
import numpy as np
from mltcp.cc import ALGORITHMS, BASE_OF, BASES, make_cc
from mltcp.cc.mltcp import hook_fields
from mltcp.scenario import from_dict
from mltcp.sim.engine import simulate

def scenario(cc, **params):
    return from_dict({"name": "toy", "iterations": 6, "warmup_iterations": 1, "cc": cc,
                      "cc_params": {cc: params} if params else {},
                      "links": [{"name": "bn", "rate_gbps": 1, "delay_us": 50, "buffer_pkts": 50}],
                      "jobs": [{"name": f"J{i}", "compute_ms": 10, "bytes": 1_000_000, "path": ["bn"],
                                "start_offset_ms": i} for i in range(2)]}, "toy.toml")

out = {"bases": list(BASES), "variant_base": BASE_OF.get("mltcp-aimd"), "hook_keys": sorted(hook_fields())}
sc = scenario("aimd", decrease=0.1)
out["scenario_cc"], out["cc_params"] = sc.cc, sc.cc_params["aimd"]
for cc in ("aimd", "mltcp-aimd", "reno"):
    r = simulate(sc, cc)
    mean_comm = float(np.mean([x.comm_duration for x in r.records]))
    out[cc] = {"records": len(r.records), "drops": r.drops, "mean_comm": mean_comm}
# the userspace senders' core: one flow's window after a congestion event
ops = make_cc("aimd", decrease=0.1)
st = ops.new_state(1, 1000)
st.cwnd[:] = st.ssthresh[:] = 20000.0
ops.on_ack(st, 20000.0, 1e-3, 0.0)
out["after_one_window"] = float(st.cwnd[0])
ops.on_congestion(st, True, "loss", 0.0)
out["after_loss"] = float(st.cwnd[0])
print(json.dumps(out))
"""


def test_a_toy_algorithm_in_one_file_simulates_end_to_end():
    env = {**os.environ, "MLTCP_CC_PATH": str(TOY_DIR)}
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "aimd" in out["bases"] and out["variant_base"] == "aimd"  # registered, with its MLTCP variant
    assert out["scenario_cc"] == "aimd" and out["cc_params"] == {"decrease": 0.1}
    for cc in ("aimd", "mltcp-aimd", "reno"):
        assert out[cc]["records"] == 12  # 2 jobs x 6 iterations completed
    assert out["aimd"] != out["reno"] and out["mltcp-aimd"] != out["aimd"]  # its own kernels ran
    assert out["after_one_window"] == 20000.0 + 2 * 1000.0  # increase = 2 segments per window
    assert out["after_loss"] == (20000.0 + 2000.0) * 0.9  # decrease = 0.1


def test_without_the_path_the_toy_is_not_there():
    env = {k: v for k, v in os.environ.items() if k != "MLTCP_CC_PATH"}
    p = subprocess.run(
        [sys.executable, "-c", "from mltcp.cc import ALGORITHMS; print(sorted(ALGORITHMS))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and "aimd" not in p.stdout and "reno" in p.stdout


def test_an_algorithm_without_its_required_hooks_is_refused_at_definition():
    import pytest
    from mltcp.cc import ALGORITHMS
    from mltcp.cc.base import CongestionOps, Ops, Param
    from mltcp.cc.reno import cong_avoid

    with pytest.raises(TypeError, match="ops lacks ssthresh, on_congestion, on_timeout"):

        class Broken(CongestionOps):
            name = "broken"
            beta = Param(0.5)
            ops = Ops(cong_avoid=cong_avoid)

    assert "broken" not in ALGORITHMS
