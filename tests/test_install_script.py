"""scripts/install-system.sh: syntax, idempotence here, and the package choices it makes elsewhere.

apt-get, curl and gpg are replaced by stubs on PATH that record their arguments, so no test
installs anything or touches the network; dpkg-query is stubbed where a test needs "nothing
installed"."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-system.sh"


def stub_bin(tmp_path: Path, names, nothing_installed=False) -> tuple[dict, Path]:
    d = tmp_path / "bin"
    d.mkdir()
    log = tmp_path / "calls.log"
    for n in names:
        p = d / n
        p.write_text(f'#!/bin/sh\necho "{n} $*" >> "{log}"\n')
        p.chmod(0o755)
    if nothing_installed:
        p = d / "dpkg-query"
        p.write_text("#!/bin/sh\nexit 1\n")
        p.chmod(0o755)
    env = dict(os.environ, PATH=f"{d}:{os.environ['PATH']}")
    env.pop("MLTCP_WITH_P4", None)
    return env, log


def test_bash_syntax():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a dpkg system")
def test_idempotent_here_without_apt(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get"])
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    if "installing" in r.stdout:
        pytest.fail(f"packages missing on this machine (run `make system`): {r.stdout}")
    assert r.returncode == 0, r.stderr
    assert "already present" in r.stdout
    assert not log.exists(), log.read_text()


def _fake_os(tmp_path, os_id, version):
    f = tmp_path / "os-release"
    f.write_text(f'ID={os_id}\nVERSION_ID="{version}"\n')
    return str(f)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_ubuntu_2204_package_list(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get"], nothing_installed=True)
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "ubuntu", "22.04")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    install = [l for l in log.read_text().splitlines() if " install " in l]
    assert len(install) == 1
    pkgs = install[0].split()
    assert "bpftool" not in pkgs and "linux-tools-common" in pkgs
    assert f"linux-tools-{os.uname().release}" in pkgs
    assert "mininet" in pkgs and "libbpf-dev" in pkgs
    assert "python3.11-venv" in pkgs  # jammy's python3 is 3.10


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_debian_keeps_bpftool(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get"], nothing_installed=True)
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "debian", "12")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    pkgs = [l for l in log.read_text().splitlines() if " install " in l][0].split()
    assert "bpftool" in pkgs and "linux-tools-common" not in pkgs


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_p4_branch_installs_curl_and_gnupg_before_using_them(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get", "curl", "gpg"])
    # hide any real p4c/simple_switch_grpc so the branch runs
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"
    env["MLTCP_WITH_P4"] = "1"
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "ubuntu", "22.04")
    apt_etc = tmp_path / "apt"
    (apt_etc / "sources.list.d").mkdir(parents=True)
    (apt_etc / "trusted.gpg.d").mkdir()
    env["MLTCP_APT_ETC"] = str(apt_etc)
    if shutil.which("p4c", path=env["PATH"]) and shutil.which("simple_switch_grpc", path=env["PATH"]):
        pytest.skip("p4c and BMv2 installed: the branch is skipped by design")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    first_curl = next(i for i, c in enumerate(calls) if c.startswith("curl "))
    pre = next(i for i, c in enumerate(calls) if c.startswith("apt-get install") and "curl" in c and "gnupg" in c)
    assert pre < first_curl
    assert "xUbuntu_22.04/Release.key" in calls[first_curl]
    assert any("p4lang-p4c" in c and "p4lang-bmv2" in c for c in calls[first_curl:])
    assert "xUbuntu_22.04" in (apt_etc / "sources.list.d" / "p4lang.list").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_p4_branch_refuses_non_ubuntu(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get", "curl", "gpg"])
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"
    env["MLTCP_WITH_P4"] = "1"
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "debian", "12")
    env["MLTCP_APT_ETC"] = str(tmp_path)
    if shutil.which("p4c", path=env["PATH"]) and shutil.which("simple_switch_grpc", path=env["PATH"]):
        pytest.skip("p4c and BMv2 installed")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3 and "needs Ubuntu" in r.stderr


# ------------------------------------------------------------------ the prebuilt p4tools tarball

P4_README = """# p4tools
## Layout
- bin/
## Debian 12 runtime packages
    apt-get install --no-install-recommends gcc python3-thrift \\
      libfoo1.74.0 libbar5 \\
      libbaz++1.51
- `gcc`: needed
## Smoke test
    apt-get install not-this-one
"""


def _fake_tarball(tmp_path: Path, readme: str = P4_README, tag: str = "1") -> Path:
    import tarfile

    src = tmp_path / f"src{tag}" / "p4tools"
    (src / "bin").mkdir(parents=True)
    (src / "README.md").write_text(readme)
    for tool in ("p4c", "p4c-bm2-ss", "simple_switch_grpc"):
        f = src / "bin" / tool
        f.write_text(f"#!/bin/sh\necho {tool} {tag}\n")
        f.chmod(0o755)
    tgz = tmp_path / f"p4tools{tag}.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src, arcname="p4tools")
    return tgz


def _p4tools_env(tmp_path, tgz, nothing_installed=True):
    env, log = stub_bin(tmp_path, ["apt-get"], nothing_installed=nothing_installed)
    env["MLTCP_P4TOOLS_TARBALL"] = str(tgz)
    env["MLTCP_TOOLS_DIR"] = str(tmp_path / "tools")
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "debian", "12")
    return env, log


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_p4tools_tarball_packages_installed_and_unpacked_once(tmp_path):
    tgz = _fake_tarball(tmp_path)
    env, log = _p4tools_env(tmp_path, tgz)
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    pkgs = [l for l in log.read_text().splitlines() if " install " in l][0].split()
    # exactly the README's apt-get command, continuation lines included, nothing from elsewhere
    assert {"gcc", "python3-thrift", "libfoo1.74.0", "libbar5", "libbaz++1.51"} <= set(pkgs)
    assert "not-this-one" not in pkgs and "--no-install-recommends" in pkgs
    tools = tmp_path / "tools" / "p4tools"
    assert (tools / "bin" / "p4c").is_file() and (tools / "README.md").is_file()
    assert "unpacked into" in r.stdout
    assert not [p for p in (tmp_path / "tools").iterdir() if p.name.startswith(".unpack")]
    # again: nothing to unpack
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "already unpacked" in r.stdout, r.stdout + r.stderr
    # a different tarball replaces the tree
    env["MLTCP_P4TOOLS_TARBALL"] = str(_fake_tarball(tmp_path, tag="2"))
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "unpacked into" in r.stdout
    assert "p4c 2" in (tools / "bin" / "p4c").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_p4tools_tarball_without_package_list_is_refused(tmp_path):
    tgz = _fake_tarball(tmp_path, readme="# p4tools\nno package section\n")
    env, log = _p4tools_env(tmp_path, tgz)
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "lists no Debian packages" in r.stderr
    assert not (tmp_path / "tools").exists() and not log.exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_p4tools_tarball_only_on_debian_12(tmp_path):
    tgz = _fake_tarball(tmp_path)
    env, log = _p4tools_env(tmp_path, tgz)
    env["MLTCP_OS_RELEASE"] = _fake_os(tmp_path, "ubuntu", "24.04")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "is for Debian 12" in r.stdout and not (tmp_path / "tools").exists()
    assert "libbar5" not in log.read_text()


def test_no_tarball_no_p4tools(tmp_path):
    """Elsewhere (no ../shared/tools) p4c/BMv2 come from PATH: nothing is unpacked."""
    env, log = stub_bin(tmp_path, ["apt-get"])
    env["MLTCP_P4TOOLS_TARBALL"] = str(tmp_path / "absent.tar.gz")
    env["MLTCP_TOOLS_DIR"] = str(tmp_path / "tools")
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "tools").exists()


def test_the_checkout_ignores_the_tools_folder():
    root = SCRIPT.parents[1]
    r = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", ".tools/p4tools/bin/p4c"])
    assert r.returncode == 0


def test_resolver_order(tmp_path, monkeypatch):
    """mltcp.tools: MLTCP_P4TOOLS, then the checkout's .tools/p4tools, then PATH."""
    from mltcp import tools

    d = tmp_path / "p4t"
    for sub in ("bin", "fast/bin"):
        (d / sub).mkdir(parents=True)
        f = d / sub / "simple_switch_grpc"
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    monkeypatch.setenv("MLTCP_P4TOOLS", str(d))
    assert tools.find("simple_switch_grpc") == str(d / "bin" / "simple_switch_grpc")
    assert tools.find("simple_switch_grpc", fast=True) == str(d / "fast" / "bin" / "simple_switch_grpc")
    assert tools.find("p4c") is None  # an explicit folder without it: no fallback
    assert "MLTCP_P4TOOLS" in tools.why_missing("p4c")
    monkeypatch.delenv("MLTCP_P4TOOLS")
    monkeypatch.setattr(tools, "DEFAULT_DIR", tmp_path / "nothing")
    pathbin = tmp_path / "path"
    pathbin.mkdir()
    (pathbin / "p4test").write_text("#!/bin/sh\n")
    (pathbin / "p4test").chmod(0o755)
    monkeypatch.setenv("PATH", str(pathbin))
    assert tools.find("p4test") == str(pathbin / "p4test")


# ------------------------------------------------------------------ the demo's minimum and the Makefile


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("dpkg") is None, reason="needs root and dpkg")
def test_demo_installs_only_python_and_venv(tmp_path):
    tgz = _fake_tarball(tmp_path)
    env, log = _p4tools_env(tmp_path, tgz)
    env["MLTCP_WITH_P4"] = "1"  # ignored by --demo, as is the p4tools tarball
    r = subprocess.run(["bash", str(SCRIPT), "--demo"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    install = [l for l in log.read_text().splitlines() if " install " in l]
    assert len(install) == 1
    pkgs = [w for w in install[0].split() if not w.startswith("-") and w not in ("apt-get", "install")]
    assert pkgs == ["python3", "python3-venv"]
    assert not (tmp_path / "tools").exists()


def test_unknown_option_is_refused(tmp_path):
    env, log = stub_bin(tmp_path, ["apt-get"])
    r = subprocess.run(["bash", str(SCRIPT), "--everything"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "--everything" in r.stderr
    assert not log.exists()


def _make_dry_run(target: str, venv: Path) -> str:
    root = SCRIPT.parents[1]
    r = subprocess.run(
        ["make", "-n", "-C", str(root), target, f"VENV={venv}"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_demo_installs_the_base_package_only(tmp_path):
    out = _make_dry_run("demo", tmp_path / "venv")
    assert "install-system.sh --demo" in out
    pip = [l for l in out.splitlines() if "pip install" in l and "--upgrade pip" not in l]
    assert len(pip) == 1 and pip[0].rstrip().endswith("-e ."), pip
    assert "mltcp demo" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_test_after_demo_upgrades_the_venv(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-demo").touch()  # a venv that `make demo` built
    out = _make_dry_run("test", venv)
    pip = [l for l in out.splitlines() if "pip install" in l and "--upgrade pip" not in l]
    assert len(pip) == 1 and "'.[switch,emulate,kernel,ns3,test" in pip[0], pip
    assert any(l.rstrip().endswith("bash scripts/install-system.sh") for l in out.splitlines()), out
    assert "pytest" in out
    # and once the full stamp is there, demo installs nothing more
    (venv / ".installed").touch()
    out = _make_dry_run("demo", venv)
    assert "pip install" not in out and "mltcp demo" in out
