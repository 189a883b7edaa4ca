"""TOML syntax errors name the key and the line, in every loader (mltcp.tomlfile)."""

from __future__ import annotations

import tomllib

import pytest

from mltcp import tomlfile

DUP_TOP = 'name = "x"\niterations = 5\nname = "y"\n'
DUP_IN_ARRAY = (
    '[[switches]]\nname = "s1"\ngrpc = "127.0.0.1:1"\n[[switches.routes]]\nprefix = "10.0.0.1/32"\nport = 1\nport = 2\n'
)


@pytest.mark.parametrize(
    "text, key, line",
    [
        (DUP_TOP, "name", 3),
        ("[a]\nx = 1\n[b]\ny = 1\n[a]\nz = 2\n", "a", 5),
        ('[[jobs]]\nname = "a"\n[[jobs]]\nname = "b"\nname = "c"\n', "jobs[1].name", 5),
        ("a.b = 1\nc = 2\na.b = 3\n", "a.b", 3),
        ('s = """\nk = 1\nk = 2\n"""\nk = 3\nk = 4\n', "k", 6),  # inside a string: not keys
        ("arr = [\n  1,\n  2,\n]\nq = 1\nq = 2\n", "q", 6),  # a multi-line array
        (DUP_IN_ARRAY, "switches[0].routes[0].port", 7),
    ],
)
def test_duplicate_key_is_named_with_its_line(text, key, line):
    with pytest.raises(tomllib.TOMLDecodeError) as e:
        tomlfile.loads(text)
    assert e.value.key == key and e.value.line == line
    assert f"duplicate key {key} at line {line}" in str(e.value)


def test_a_bad_value_names_the_key_on_its_line():
    with pytest.raises(tomlfile.TomlKeyError) as e:
        tomlfile.loads("a = 1\nrate = \n")
    assert (e.value.key, e.value.line) == ("rate", 2)
    assert str(e.value).startswith("key rate at line 2")


def test_a_valid_document_parses_as_tomllib_does():
    text = '[x]\na = 1\n[[y]]\nb = "s"\n[[y]]\nb = "t"\n'
    assert tomlfile.loads(text) == tomllib.loads(text)


# --- every loader ----------------------------------------------------------------------------


def test_scenario_loader(tmp_path):
    from mltcp.scenario import ScenarioError, load

    p = tmp_path / "dup.toml"
    p.write_text(DUP_TOP)
    with pytest.raises(ScenarioError) as e:
        load(str(p))
    assert str(e.value).startswith(str(p)) and "duplicate key name at line 3" in str(e.value)


def test_scenario_cli_exits_2_naming_the_key(tmp_path):
    from typer.testing import CliRunner

    from mltcp.cli import app

    p = tmp_path / "dup.toml"
    p.write_text(DUP_TOP)
    r = CliRunner().invoke(app, ["simulate", str(p)])
    assert r.exit_code == 2
    assert "duplicate key name at line 3" in r.output.replace("\n", " ")


def test_topology_loader(tmp_path):
    from controlplane.topology import TopologyError, load_topology

    p = tmp_path / "topo.toml"
    p.write_text(DUP_IN_ARRAY)
    with pytest.raises(TopologyError) as e:
        load_topology(p)
    assert "duplicate key switches[0].routes[0].port at line 7" in str(e.value)
    assert str(e.value).startswith(str(p))


def test_tune_space_loader(tmp_path):
    from mltcp.tune_space import SpaceError, load

    p = tmp_path / "space.toml"
    p.write_text(
        'name = "s"\nbase = "reno"\n[search]\n"mltcp.slope" = { low = 1.0, high = 2.0 }\n'
        '"mltcp.slope" = { low = 1.0, high = 3.0 }\n'
    )
    with pytest.raises(SpaceError) as e:
        load(str(p))
    assert "duplicate key search.mltcp.slope at line 5" in str(e.value)


def test_tune_cases_loader(tmp_path):
    from mltcp.scenario import ScenarioError
    from mltcp.tune_eval import make_cases

    p = tmp_path / "case.toml"
    p.write_text(DUP_TOP)
    with pytest.raises(ScenarioError) as e:
        make_cases([str(p)], [1])
    assert "duplicate key name at line 3" in str(e.value)
