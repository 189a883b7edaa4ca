#!/usr/bin/env bash
# System packages for mltcp. One script shared by the Makefile, CI (.ci/run) and the Vagrantfile.
# Idempotent: re-running it installs nothing that is already there.
#
#   MLTCP_WITH_P4=1   also install p4c and BMv2 (only possible where p4lang's Ubuntu packages
#                     are reachable, e.g. the Vagrant VM); off by default.
set -euo pipefail

need_root() { if [ "$(id -u)" -ne 0 ]; then echo "install-system.sh: run as root (sudo)" >&2; exit 2; fi; }

PKGS=(
  python3 python3-venv python3-dev
  mininet bridge-utils iproute2 iputils-ping ethtool tcpdump iperf3 nftables
  openvswitch-switch
  clang llvm libbpf-dev bpftool make gcc
  tshark
)

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

if [ "${MLTCP_WITH_P4:-0}" = "1" ]; then
  need_root
  if ! command -v p4c >/dev/null || ! command -v simple_switch_grpc >/dev/null; then
    # p4lang publishes p4c and BMv2 for Ubuntu through the openSUSE build service.
    . /etc/os-release
    repo="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${VERSION_ID}"
    echo "deb ${repo}/ /" > /etc/apt/sources.list.d/p4lang.list
    curl -fsSL "${repo}/Release.key" | gpg --dearmor > /etc/apt/trusted.gpg.d/p4lang.gpg
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq p4lang-p4c p4lang-bmv2
  fi
fi
