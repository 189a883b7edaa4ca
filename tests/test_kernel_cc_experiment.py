"""A short run of the two-job kernel experiment and the `mltcp kernel` CLI's error paths."""

import pytest
from typer.testing import CliRunner

from mltcp.traffic.kernel import loader
from mltcp.traffic.kernel.cli import app
from mltcp.emulation.netns import have_mininet_prereqs, leftovers, run_prefix
from _kernel_prereq import missing


REASON = missing() or have_mininet_prereqs()
if REASON:
    print(f"test_kernel_cc_experiment: skipping root tests: {REASON}")
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_cli_rejects_bad_input_with_exit_2():
    r = CliRunner().invoke(app, ["load", "--idle-fraction", "0"])
    assert r.exit_code == 2 and "idle_fraction" in r.output
    r = CliRunner().invoke(app, ["build", "--variant", "nope"])
    assert r.exit_code == 2 and "unknown variant" in r.output
    r = CliRunner().invoke(app, ["experiment", "--iterations", "1"])
    assert r.exit_code == 2 and "iterations" in r.output


def test_cli_restart_window_must_be_a_non_negative_whole_number():
    for cmd in ("load", "experiment"):
        for bad in ("-1", "2.5", "many"):
            r = CliRunner().invoke(app, [cmd, "--restart-window", bad])
            assert r.exit_code == 2 and "--restart-window" in r.output, (cmd, bad, r.output)
    from mltcp.traffic.kernel.cli import _config

    assert _config(4.0, 0.25, 0.9, 1.0, None, False, "mltcp_reno", 12).restart_window == 12
    assert _config(4.0, 0.25, 0.9, 1.0, None, False, "mltcp_reno").restart_window == 0


def test_case_validation():
    from mltcp.traffic.kernel.experiment import Case

    with pytest.raises(ValueError, match="variant"):
        Case(variant="bbr")
    assert Case(nbytes=1_000_000, rate_mbit=100).compute == pytest.approx(0.08)
    for bad in ({"delay_ms": -1}, {"min_rto_ms": -5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Case(**bad)


def test_case_rate_in_payload_or_frames():
    from mltcp.traffic.kernel.experiment import Case
    from mltcp.traffic.kernel.transport import WIRE_PER_PAYLOAD

    c = Case(rate_mbit=100, nbytes=2_500_000)
    assert c.link_mbit == pytest.approx(100 * 1514 / 1448) and c.compute == pytest.approx(0.2)
    w = Case(rate_mbit=100, nbytes=2_500_000, payload_rate=False)
    assert w.link_mbit == 100 and w.compute == pytest.approx(0.2 * WIRE_PER_PAYLOAD)


@pytest.mark.integration
@pytest.mark.root
@needs_root
def test_short_experiment_runs_both_and_cleans_up():
    prefix = run_prefix() + "x"
    from mltcp.traffic.kernel.experiment import Case, run

    case = Case(rate_mbit=50, buffer_bytes=60_000, nbytes=200_000, iterations=6, warmup=1, delay_ms=1, min_rto_ms=500)
    was = set(loader.registered())
    try:
        doc = run(case, with_sim=False, prefix=prefix)
    finally:
        assert not leftovers(prefix)
    assert set(doc["results"]) == {"reno", "mltcp_reno"}
    assert doc["delay_line"]["forwarded_ab"] > 0 and doc["delay_line"]["overflow"] == 0
    for cc, r in doc["results"].items():
        recs = r["records"]
        assert len(recs) == 12 and {x["job"] for x in recs} == {"A", "B"}
        for x in recs:
            assert x["start"] <= x["comm_start"] <= x["end"] and x["bytes"] == 200_000
            assert x["end"] - x["comm_start"] >= 200_000 * 8 / 50e6 * 0.9  # not faster than the link
        assert r["retransmits"] >= 0 and r["avg_iter_s"] > case.compute
    # The experiment loads the variant itself when needed and leaves the registration as it was.
    assert set(loader.registered()) == was
