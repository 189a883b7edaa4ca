"""The ns-3 engine's C++ (mltcp/sim/ns3/*.h) as files: every header is reached from the one that
mltcp.sim.ns3_cxx.load includes, every local include names a file that exists, and the package
data ships them all (an installed wheel has what cppyy compiles). Compiling them is
tests/test_ns3_engine.py's part."""

import fnmatch
import re
import tomllib
from pathlib import Path

from mltcp.sim import ns3_cxx

ROOT = Path(__file__).resolve().parents[1]
LOCAL_INCLUDE = re.compile(r'^#include "([^"/]+)"', re.M)


def test_every_header_is_reached_from_the_one_load_includes():
    seen, todo = set(), [ns3_cxx.HEADER.name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        f = ns3_cxx.CXX_DIR / name
        assert f.is_file(), f"{name} is included but does not exist"
        seen.add(name)
        todo += LOCAL_INCLUDE.findall(f.read_text())
    assert seen == {p.name for p in ns3_cxx.CXX_DIR.glob("*.h")}


def test_each_header_guards_itself():
    for f in ns3_cxx.CXX_DIR.glob("*.h"):
        assert "#pragma once" in f.read_text(), f.name


def test_package_data_ships_the_headers():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data.get("mltcp.sim", [])
    sim = ROOT / "mltcp" / "sim"
    for f in ns3_cxx.CXX_DIR.glob("*"):
        rel = f.relative_to(sim).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), f"{rel} is not package data of mltcp.sim"
