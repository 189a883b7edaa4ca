#!/usr/bin/env bash
# System packages for mltcp. One script shared by the Makefile, CI (.ci/run) and the Vagrantfile.
# Idempotent: re-running it installs nothing that is already there.
#
#   --demo            only what `make demo` needs (python3 and its venv module: the base package
#                     installs from PyPI as wheels); no compilers, Mininet, BPF tools or p4tools.
#                     Without it: every package any extra and the test suite need.
#   MLTCP_WITH_P4=1   also install p4c and BMv2 (only possible where p4lang's Ubuntu packages
#                     are reachable, e.g. the Vagrant VM); off by default.
#   MLTCP_OS_RELEASE, MLTCP_APT_ETC   where to read the distribution and write apt sources
#                     (default /etc/os-release, /etc/apt; tests point them elsewhere).
#   MLTCP_P4TOOLS_TARBALL  prebuilt p4c + BMv2 for Debian 12 (default: ../shared/tools/
#                     p4tools-debian12-amd64.tar.gz beside the checkout). When it exists, the
#                     Debian runtime packages its p4tools/README.md lists are installed and it is
#                     unpacked into MLTCP_TOOLS_DIR (default .tools in the checkout, git-ignored),
#                     where mltcp.tools finds it; again only when the tarball changed. Only on
#                     Debian 12, which the tarball is built for.
set -euo pipefail

DEMO_ONLY=0
case "${1:-}" in
  --demo) DEMO_ONLY=1 ;;
  "") ;;
  *) echo "install-system.sh: unknown option '$1' (only --demo)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
P4TOOLS_TARBALL="${MLTCP_P4TOOLS_TARBALL:-$ROOT/../shared/tools/p4tools-debian12-amd64.tar.gz}"
TOOLS_DIR="${MLTCP_TOOLS_DIR:-$ROOT/.tools}"

OS_RELEASE="${MLTCP_OS_RELEASE:-/etc/os-release}"
APT_ETC="${MLTCP_APT_ETC:-/etc/apt}"
OS_ID=$(. "$OS_RELEASE" && echo "${ID:-}")
OS_VERSION_ID=$(. "$OS_RELEASE" && echo "${VERSION_ID:-}")

need_root() { if [ "$(id -u)" -ne 0 ]; then echo "install-system.sh: run as root (sudo)" >&2; exit 2; fi; }

# make demo: the interpreter and its venv module; numpy, numba, matplotlib... come as wheels.
DEMO_PKGS=(python3 python3-venv)
# make test: every compiler an extra needs (g++ for cppyy-backend, which pip may build from
# source; clang for the BPF programs), Mininet, BPF tools, torch, PostgreSQL.
PKGS=(
  python3 python3-venv python3-dev
  mininet bridge-utils iproute2 iputils-ping ethtool tcpdump iperf3 nftables
  openvswitch-switch
  clang llvm libbpf-dev bpftool make gcc g++
  tshark
  python3-torch
  postgresql
)
# Ubuntu before 23.04 has no bpftool package (it ships in linux-tools for the running kernel),
# and its python3 is 3.10: mltcp needs 3.11 (make ... PYTHON_SYS=/usr/bin/python3.11).
if [ "$OS_ID" = ubuntu ] && dpkg --compare-versions "$OS_VERSION_ID" lt 23.04; then
  PKGS=("${PKGS[@]/bpftool/linux-tools-common}" "linux-tools-$(uname -r)" python3.11 python3.11-venv python3.11-dev)
  DEMO_PKGS+=(python3.11 python3.11-venv)
fi
if [ "$DEMO_ONLY" = 1 ]; then
  PKGS=("${DEMO_PKGS[@]}")
  P4TOOLS_TARBALL=""
  MLTCP_WITH_P4=0
fi

# The Debian packages the prebuilt p4tools need: the `apt-get install ...` command (with its
# backslash continuations) under "## Debian 12 runtime packages" in the tarball's README.
p4tools_packages() {
  tar -xzOf "$1" p4tools/README.md | awk '
    /^## Debian 12 runtime packages/ { sec = 1; next }
    sec && /^## / { exit }
    sec && /apt-get install/ { cmd = 1 }
    cmd { line = $0; more = (line ~ /\\[[:space:]]*$/); sub(/\\[[:space:]]*$/, "", line)
          n = split(line, w, /[[:space:]]+/)
          for (i = 1; i <= n; i++) if (w[i] != "" && w[i] != "apt-get" && w[i] != "install" && w[i] !~ /^-/) print w[i]
          if (!more) exit }'
}

# The tarball is built for Debian 12 (its library versions); elsewhere p4c/BMv2 come from PATH.
if [ -f "$P4TOOLS_TARBALL" ] && ! { [ "$OS_ID" = debian ] && [ "${OS_VERSION_ID%%.*}" = 12 ]; }; then
  echo "install-system.sh: $P4TOOLS_TARBALL is for Debian 12, this is ${OS_ID:-unknown} ${OS_VERSION_ID}: not used"
  P4TOOLS_TARBALL=""
fi

if [ -n "$P4TOOLS_TARBALL" ] && [ -f "$P4TOOLS_TARBALL" ]; then
  mapfile -t P4PKGS < <(p4tools_packages "$P4TOOLS_TARBALL")
  if [ "${#P4PKGS[@]}" -eq 0 ]; then
    echo "install-system.sh: $P4TOOLS_TARBALL: p4tools/README.md lists no Debian packages" >&2
    exit 2
  fi
  PKGS+=("${P4PKGS[@]}")
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  need_root
  echo "install-system.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-system.sh: system packages already present"
fi

if [ -n "$P4TOOLS_TARBALL" ] && [ -f "$P4TOOLS_TARBALL" ]; then
  # Unpack into a scratch folder beside the target and move it into place, so an interrupted
  # run leaves no half-written tree; the tarball's checksum says whether it is up to date.
  sum=$(sha256sum "$P4TOOLS_TARBALL" | cut -d' ' -f1)
  if [ -x "$TOOLS_DIR/p4tools/bin/p4c" ] && [ "$(cat "$TOOLS_DIR/p4tools.sha256" 2>/dev/null)" = "$sum" ]; then
    echo "install-system.sh: p4tools already unpacked in $TOOLS_DIR/p4tools"
  else
    mkdir -p "$TOOLS_DIR"
    tmp=$(mktemp -d "$TOOLS_DIR/.unpack.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    tar -C "$tmp" -xzf "$P4TOOLS_TARBALL"
    "$tmp/p4tools/bin/p4c-bm2-ss" --version >/dev/null 2>&1
    rm -rf "$TOOLS_DIR/p4tools" "$TOOLS_DIR/p4tools.sha256"
    mv "$tmp/p4tools" "$TOOLS_DIR/p4tools"
    echo "$sum" > "$TOOLS_DIR/p4tools.sha256"
    rm -rf "$tmp"
    trap - EXIT
    echo "install-system.sh: p4c and BMv2 unpacked into $TOOLS_DIR/p4tools"
  fi
fi

if [ "${MLTCP_WITH_P4:-0}" = "1" ]; then
  need_root
  if ! command -v p4c >/dev/null || ! command -v simple_switch_grpc >/dev/null; then
    if [ "$OS_ID" != ubuntu ]; then
      echo "install-system.sh: MLTCP_WITH_P4=1 needs Ubuntu (p4lang's packages); this is ${OS_ID:-unknown}" >&2
      exit 3
    fi
    # p4lang publishes p4c and BMv2 for Ubuntu through the openSUSE build service. The key is
    # fetched with curl and de-armored with gpg, so both (and CA certificates) come first.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends curl gnupg ca-certificates >/dev/null
    repo="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${OS_VERSION_ID}"
    echo "deb ${repo}/ /" > "${APT_ETC}/sources.list.d/p4lang.list"
    curl -fsSL "${repo}/Release.key" | gpg --dearmor > "${APT_ETC}/trusted.gpg.d/p4lang.gpg"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq p4lang-p4c p4lang-bmv2
  fi
fi
