"""scripts/check-fresh-rootfs.sh: its options and the Debian mirror it picks from apt's sources
(one-line and deb822 formats). The real run (debootstrap, then `make demo` in a chroot; several
minutes) is opt-in: MLTCP_FRESH_ROOTFS=1 with debootstrap installed, as root."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check-fresh-rootfs.sh"


def _mirror(tmp_path: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        f = tmp_path / "apt" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    r = subprocess.run(
        ["bash", str(SCRIPT), "--print-mirror"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, MLTCP_APT_ETC=str(tmp_path / "apt")),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_bash_syntax():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_option_is_refused():
    r = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--fast" in r.stderr


def test_mirror_from_a_one_line_list(tmp_path):
    out = _mirror(
        tmp_path,
        {
            "sources.list": "# deb http://old/debian bookworm main\n"
            "deb http://security.example/debian-security bookworm-security main\n"
            "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
        },
    )
    assert out == "http://mirror.example/debian\n"


def test_mirror_from_deb822_skips_the_security_suite(tmp_path):
    out = _mirror(
        tmp_path,
        {
            "sources.list.d/a.sources": "Types: deb\nURIs: http://sec.example/debian-security\n"
            "Suites: bookworm-security\nComponents: main\n\n"
            "Types: deb\nURIs: http://m.example/debian\n"
            "Suites: bookworm bookworm-updates\nComponents: main\n"
        },
    )
    assert out == "http://m.example/debian\n"


def test_no_sources_falls_back_to_debians_own(tmp_path):
    (tmp_path / "apt").mkdir()
    assert _mirror(tmp_path, {}) == "http://deb.debian.org/debian\n"


@pytest.mark.integration
@pytest.mark.skipif(
    os.environ.get("MLTCP_FRESH_ROOTFS") != "1", reason="opt-in: MLTCP_FRESH_ROOTFS=1 (several minutes)"
)
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("debootstrap") is None, reason="needs root and debootstrap")
def test_make_demo_passes_in_a_fresh_rootfs():
    r = subprocess.run(["bash", str(SCRIPT), "--demo-only"], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "=== make demo:" in r.stdout and "never" in r.stdout
    assert not [m for m in Path("/proc/self/mounts").read_text().splitlines() if "mltcp-fresh." in m]
