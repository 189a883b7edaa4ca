"""One shipped default (mltcp.defaults) in every engine: the hook's Params (simulator, userspace
senders, ns-3), the kernel's Config and the BPF header's built-in numbers."""

import re
from pathlib import Path

from mltcp import defaults
from mltcp.cc import ALGORITHMS
from mltcp.traffic.kernel import maps

HEADER = Path(__file__).resolve().parents[1] / "traffic" / "kernel" / "mltcp_cc.bpf.h"
SWITCH = {"adaptive": "ADAPTIVE", "trial": "TRIAL", "contended_above": "CONTENDED_ABOVE", "hold_max": "HOLD_MAX"}


def _defines(path: Path = HEADER) -> dict[str, str]:
    return dict(re.findall(r"^#define (MLTCP_\w+) (\S+)", path.read_text(), re.M))


def _variant_defines(variant: str) -> dict[str, str]:
    """The built-in numbers one BPF variant compiles with: its .bpf.c's defines over the header's."""
    return {**_defines(), **_defines(HEADER.with_name(maps.VARIANTS[variant][0]))}


def test_every_mltcp_variant_defaults_to_the_shipped_numbers():
    for name in ("mltcp-reno", "mltcp-cubic", "mltcp-dctcp", "mltcp-dcqcn"):
        cc = ALGORITHMS[name]()
        assert (cc.slope, cc.intercept) == (defaults.SLOPE, defaults.INTERCEPT), name
        assert {k: getattr(cc, k) for k in SWITCH} == {k: getattr(defaults, v) for k, v in SWITCH.items()}, name
        assert getattr(cc, "min_window", None) == (defaults.MIN_WINDOW if cc.window_based else None), name
        base = name.removeprefix("mltcp-")
        assert getattr(cc, "above_bdp_gain", None) == (defaults.above_bdp_gain(base) if cc.window_based else None)


def test_the_shipped_f_is_the_public_one_scaled_to_a_mean_of_one():
    mean = defaults.SLOPE / 2 + defaults.INTERCEPT  # the mean of slope r + intercept over r in [0, 1]
    assert abs(mean - 1.0) < 0.01
    assert abs(defaults.SLOPE / defaults.INTERCEPT - 4.0 / 0.25) < 0.5  # the public F's shape


def test_the_kernel_config_and_the_bpf_built_ins_are_the_same_numbers():
    cfg = maps.Config()
    assert (cfg.slope, cfg.intercept, cfg.adaptive) == (defaults.SLOPE, defaults.INTERCEPT, defaults.ADAPTIVE)
    assert (cfg.trial, cfg.contended_above, cfg.hold_max) == (
        defaults.TRIAL,
        defaults.CONTENDED_ABOVE,
        defaults.HOLD_MAX,
    )
    d = _defines()
    assert int(d["MLTCP_DEF_SLOPE"].rstrip("U")) == round(defaults.SLOPE * 1024)
    assert int(d["MLTCP_DEF_INTERCEPT"].rstrip("U")) == round(defaults.INTERCEPT * 1024)
    assert int(d["MLTCP_DEF_TRIAL"].rstrip("U")) == defaults.TRIAL
    assert int(d["MLTCP_DEF_CONTENDED_Q10"].rstrip("U")) == round(defaults.CONTENDED_ABOVE * 1024)
    assert int(d["MLTCP_DEF_HOLD_MAX"].rstrip("U")) == defaults.HOLD_MAX
    assert (d["MLTCP_DEF_FLAGS"] == "MLTCP_FLAG_ADAPTIVE") == defaults.ADAPTIVE
    assert cfg.min_window == int(d["MLTCP_DEF_MIN_WINDOW"].rstrip("U")) == defaults.MIN_WINDOW
    assert cfg.above_bdp_gain is None  # unset: each variant's own built-in, its base's shipped default
    for v in maps.VARIANTS:
        q10 = int(_variant_defines(v)["MLTCP_DEF_ABOVE_BDP_Q10"].rstrip("U"))
        assert q10 / 1024 == maps.ABOVE_BDP_DEFAULT[v] == defaults.above_bdp_gain(v.removeprefix("mltcp_")), v
    assert int(d["MLTCP_FLAG_ADAPTIVE"].rstrip("U")) == maps.FLAG_ADAPTIVE


def test_the_kernel_cli_loads_the_shipped_default_unless_told_otherwise():
    import inspect

    from mltcp.traffic.kernel import cli

    opts = inspect.signature(cli.load).parameters
    assert (opts["slope"].default.default, opts["intercept"].default.default) == (defaults.SLOPE, defaults.INTERCEPT)
    assert opts["adaptive"].default.default is defaults.ADAPTIVE
    assert opts["min_window"].default.default == defaults.MIN_WINDOW
    assert opts["above_bdp_gain"].default.default is None  # the variant's own (maps.ABOVE_BDP_DEFAULT)
    assert cli._config(1.0, 0.5, 0.9, 1.0, None, above_bdp_gain=0.5).above_bdp_gain == 0.5
    assert cli._config(1.0, 0.5, 0.9, 1.0, None, min_window=0).min_window == 0
    assert cli._config(1.0, 0.5, 0.9, 1.0, None, variant="mltcp_reno", adaptive=False).adaptive is False
