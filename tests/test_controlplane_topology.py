"""Topology files: parsing, validation errors that name file and field, CLI exit code 2."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mltcp.controlplane.cli import app
from mltcp.controlplane.topology import (
    Route,
    TopologyError,
    load_topology,
    parse_topology,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "controlplane" / "topologies" / "dumbbell.toml"

GOOD = """
[defaults]
device_id = 3
election_id = [2, 7]

[[switches]]
name = "s1"
grpc = "127.0.0.1:9559"

  [[switches.routes]]
  prefix = "10.0.0.0/24"
  port = 1
  mac = "AA:bb:cc:dd:ee:01"

  [[switches.routes]]
  prefix = "10.0.1.5"
  port = 511
  mac = "00:00:00:00:00:02"

  [[switches.ecn]]
  port = 1
  threshold = 10

[[switches]]
name = "s2"
grpc = "127.0.0.1:9560"
device_id = 1
p4info = "sub/x.txtpb"
"""


def write(tmp_path: Path, text: str, name: str = "topo.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_example_file_loads():
    topo = load_topology(EXAMPLE)
    assert [s.name for s in topo.switches] == ["s1", "s2"]
    s1 = topo.switch("s1")
    assert s1.grpc == "127.0.0.1:9559" and s1.device_id == 0
    assert Route("10.0.0.3/32", 3, "00:00:00:00:00:03") in s1.routes
    assert [(e.port, e.threshold) for e in s1.ecn] == [(3, 20)]


def test_good_file_values_and_defaults(tmp_path):
    topo = load_topology(write(tmp_path, GOOD))
    s1, s2 = topo.switches
    assert (s1.device_id, s1.election_id) == (3, (2, 7))  # inherited from [defaults]
    assert s2.device_id == 1  # overridden
    assert s1.routes[0] == Route("10.0.0.0/24", 1, "aa:bb:cc:dd:ee:01")  # MAC lower-cased
    assert s1.routes[1].prefix == "10.0.1.5/32"  # bare address = host route
    assert s2.p4info == (tmp_path / "sub" / "x.txtpb")  # relative to the file
    assert s2.routes == () and s2.ecn == ()


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("port = 511", "port = 512", "switches[0].routes[1].port"),
        ("port = 511", "port = -1", "switches[0].routes[1].port"),
        ("port = 511", 'port = "1"', "switches[0].routes[1].port"),
        ("port = 511", "port = true", "switches[0].routes[1].port"),
        ('prefix = "10.0.0.0/24"', 'prefix = "10.0.0.1/24"', "switches[0].routes[0].prefix"),
        ('prefix = "10.0.0.0/24"', 'prefix = "10.0.0.0/33"', "switches[0].routes[0].prefix"),
        ('prefix = "10.0.0.0/24"', 'prefix = "fe80::/64"', "switches[0].routes[0].prefix"),
        ('prefix = "10.0.0.0/24"', 'prefix = "10.0.1.5/32"', "switches[0].routes[1].prefix"),
        ('mac = "AA:bb:cc:dd:ee:01"', 'mac = "aa:bb:cc:dd:ee"', "switches[0].routes[0].mac"),
        ("threshold = 10", "threshold = 524288", "switches[0].ecn[0].threshold"),
        ("threshold = 10", "threshold = 1.5", "switches[0].ecn[0].threshold"),
        ('grpc = "127.0.0.1:9560"', 'grpc = "127.0.0.1"', "switches[1].grpc"),
        ('grpc = "127.0.0.1:9560"', 'grpc = "127.0.0.1:70000"', "switches[1].grpc"),
        ('grpc = "127.0.0.1:9560"\ndevice_id = 1', 'grpc = "127.0.0.1:9559"', "switches[1].grpc"),
        ('name = "s2"', 'name = "s1"', "switches[1].name"),
        ('name = "s2"', 'name = "s 2"', "switches[1].name"),
        ("election_id = [2, 7]", "election_id = [0, 0]", "defaults.election_id"),
        ("election_id = [2, 7]", "election_id = [1]", "defaults.election_id"),
        ("device_id = 3", "device_id = -3", "defaults.device_id"),
        ("  threshold = 10", '  threshold = 10\n  colour = "red"', "switches[0].ecn[0].colour"),
        ("device_id = 1", "devce_id = 1", "switches[1].devce_id"),
    ],
)
def test_bad_values_name_file_and_field(tmp_path, old, new, field):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(TopologyError) as ei:
        load_topology(path)
    assert ei.value.source == str(path)
    assert ei.value.where == field
    assert str(ei.value).startswith(f"{path}: {field}: ")


@pytest.mark.parametrize(
    "drop,field",
    [
        ("  port = 1\n  mac", "switches[0].routes[0].port"),
        ('name = "s2"\n', "switches[1].name"),
    ],
)
def test_missing_fields(tmp_path, drop, field):
    text = GOOD.replace(drop, drop.split("\n")[-1] if "\n" in drop else "", 1)
    assert text != GOOD
    with pytest.raises(TopologyError) as ei:
        load_topology(write(tmp_path, text))
    assert ei.value.where == field and "missing" in str(ei.value)


def test_no_switches(tmp_path):
    with pytest.raises(TopologyError, match="switches"):
        load_topology(write(tmp_path, "[defaults]\ndevice_id = 0\n"))


def test_invalid_toml_names_file(tmp_path):
    path = write(tmp_path, "[[switches]\nname = ")
    with pytest.raises(TopologyError, match="invalid TOML") as ei:
        load_topology(path)
    assert str(ei.value).startswith(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(tmp_path / "nope.toml")


def test_unknown_switch_name():
    topo = parse_topology({"switches": [{"name": "a", "grpc": "127.0.0.1:1"}]}, "t.toml")
    with pytest.raises(TopologyError, match="no switch named 'b'"):
        topo.switch("b")


# --- CLI: bad input -> exit code 2, message names file and field; nothing contacted ------

runner = CliRunner()


def test_cli_install_bad_file_exit_2(tmp_path):
    path = write(tmp_path, GOOD.replace("port = 511", "port = 4096"))
    res = runner.invoke(app, ["install", str(path), "--dry-run"])
    assert res.exit_code == 2
    assert str(path) in res.output and "switches[0].routes[1].port" in res.output


def test_cli_error_quotes_toml_table_names_literally(tmp_path):
    # rich markup would take "[[switches]]" for a style tag and print "[]"
    res = runner.invoke(app, ["install", str(write(tmp_path, "[defaults]\ndevice_id = 0\n")), "--dry-run"])
    assert res.exit_code == 2 and "expected at least one [[switches]] table" in res.output


def test_cli_install_missing_file_exit_2(tmp_path):
    res = runner.invoke(app, ["install", str(tmp_path / "none.toml")])
    assert res.exit_code == 2 and "none.toml" in res.output


def test_cli_set_ecn_bad_values_exit_2():
    res = runner.invoke(app, ["set-ecn", "--port", "600", "--threshold", "5"])
    assert res.exit_code == 2 and "--port" in res.output
    res = runner.invoke(app, ["set-ecn", "--port", "1"])
    assert res.exit_code == 2 and "--threshold" in res.output
    res = runner.invoke(app, ["set-ecn", "--port", "1", "--threshold", "5", "--off"])
    assert res.exit_code == 2


def test_cli_bad_grpc_and_election_id_exit_2():
    res = runner.invoke(app, ["counters", "--grpc", "localhost"])
    assert res.exit_code == 2 and "--grpc" in res.output
    res = runner.invoke(app, ["counters", "--election-id", "x,y"])
    assert res.exit_code == 2 and "--election-id" in res.output


def test_cli_install_dry_run_json():
    res = runner.invoke(app, ["install", str(EXAMPLE), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["dry_run"] is True
    by_name = {s["switch"]: s for s in doc["switches"]}
    assert by_name["s1"]["routes"] == 4 and by_name["s1"]["ecn_thresholds"] == 1
    assert len(by_name["s2"]["entries"]) == 3 + 1
