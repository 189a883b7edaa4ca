#!/usr/bin/env bash
# Fresh-machine check: `make demo` and `make test` in a new Debian 12 minimal root filesystem.
#
# Builds the root filesystem with `debootstrap --variant=minbase bookworm` from this machine's
# Debian mirror, installs only git and make inside (the way a new VM starts), clones this
# checkout's HEAD into it, then runs `make demo` and `make test` there (pivot_root into it). Prints how
# long each step took. Its mounts live in a mount namespace of its own, gone when the step ends
# (failure or Ctrl-C included); the root filesystem is removed at the end.
#
#   sudo bash scripts/check-fresh-rootfs.sh [--demo-only] [--keep]
#
#   --demo-only         stop after `make demo`
#   --keep              keep the root filesystem (default: removed at the end)
#   --print-mirror      print the mirror it would use and exit
#   MLTCP_FRESH_DIR     where to build it (default: a new folder under /var/tmp)
#   MLTCP_APT_ETC       where to read apt sources (default /etc/apt)
#
# When this checkout has ../shared/tools/p4tools-*.tar.gz beside it, a copy goes beside the
# clone too (as CI gets a copy of shared/), so the P4 tests run there as they do here. This
# machine's pip settings (PIP_INDEX_URL, the CA file of PIP_CERT or /etc/pip.conf) are carried
# in, as the apt mirror is: the registry is reached the same way.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APT_ETC="${MLTCP_APT_ETC:-/etc/apt}"
DEMO_ONLY=0
KEEP=0
PRINT_MIRROR=0
for arg in "$@"; do
  case "$arg" in
    --demo-only) DEMO_ONLY=1 ;;
    --keep) KEEP=1 ;;
    --print-mirror) PRINT_MIRROR=1 ;;
    *) echo "check-fresh-rootfs.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done

# The first Debian mirror that serves the suite `bookworm` itself (not -security, -updates),
# from one-line (*.list) or deb822 (*.sources) apt sources.
debian_mirror() {
  local files=()
  [ -f "$APT_ETC/sources.list" ] && files+=("$APT_ETC/sources.list")
  for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ "${#files[@]}" -gt 0 ] || return 0
  awk '
    function stanza_end() {
      if (!found && uris != "" && (" " suites " ") ~ / bookworm /) { split(uris, u, /[[:space:]]+/); print u[1]; found = 1; exit }
      uris = ""; suites = "" }
    FNR == 1 { stanza_end() }
    /^[[:space:]]*#/ { next }
    /^deb[[:space:]]/ {
      i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if ($(i + 1) == "bookworm") { print $i; found = 1; exit }
      next }
    /^URIs:/ { sub(/^URIs:[[:space:]]*/, ""); uris = $0; next }
    /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0; next }
    /^[[:space:]]*$/ { stanza_end() }
    END { stanza_end() }' "${files[@]}"
}

MIRROR="$(debian_mirror)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
if [ "$PRINT_MIRROR" = 1 ]; then echo "$MIRROR"; exit 0; fi

if [ "$(id -u)" -ne 0 ]; then echo "check-fresh-rootfs.sh: run as root (sudo)" >&2; exit 2; fi
if ! command -v debootstrap >/dev/null; then
  echo "check-fresh-rootfs.sh: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

WORK="${MLTCP_FRESH_DIR:-$(mktemp -d /var/tmp/mltcp-fresh.XXXXXX)}"
RFS="$WORK/rootfs"
mkdir -p "$RFS"

CA_COPY=/root/.pip-ca.crt
pip_conf_cert() { sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' /etc/pip.conf 2>/dev/null | head -1; }

mounted_under() { awk -v r="$RFS" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r; }

cleanup() {
  local rc=$?
  # processes left inside the chroot (by their PID, found through /proc/PID/root)
  local pids=()
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/root" 2>/dev/null)" = "$RFS" ] && pids+=("${d#/proc/}")
  done
  if [ "${#pids[@]}" -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; sleep 1; kill -9 "${pids[@]}" 2>/dev/null || true; fi
  local m
  for m in $(mounted_under); do umount -R "$m" 2>/dev/null || umount -R -l "$m" 2>/dev/null || true; done
  if [ -n "$(mounted_under)" ]; then
    echo "check-fresh-rootfs.sh: still mounted under $RFS, not removing it:" >&2
    mounted_under >&2
  elif [ "$KEEP" = 0 ]; then
    rm -rf "$WORK"
  else
    echo "check-fresh-rootfs.sh: kept $RFS"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

declare -A TOOK
step() {  # step NAME COMMAND...: run it, print and remember its duration
  local name="$1"; shift
  local t0=$SECONDS
  echo "=== $name"
  "$@"
  TOOK[$name]=$((SECONDS - t0))
  printf '=== %s: %d min %02d s\n' "$name" $((TOOK[$name] / 60)) $((TOOK[$name] % 60))
}

# Inside the new root: its own mount and PID namespaces, pivot_root into it (not chroot: Mininet
# enters its hosts' mount namespaces, whose root a chroot does not change), /proc, /sys (with
# /sys/fs/bpf and /sys/fs/cgroup) and /dev (with /dev/pts) mounted there. Nothing is mounted on
# this machine's side: the mounts go with the namespace, and every process inside with its PID 1.
PIVOT='set -e
rfs=$1; cmd=$2; shift 2
mount --bind "$rfs" "$rfs"
mount -t proc proc "$rfs/proc"
mount --rbind /sys "$rfs/sys"
mount --rbind /dev "$rfs/dev"
mkdir -p "$rfs/.oldroot"
cd "$rfs"
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
cd /
exec /usr/bin/env -i "$@" bash -c "$cmd"'

in_chroot() {  # in_chroot COMMAND: a login-like environment, nothing from this shell but pip's settings
  local envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
              LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive TERM=dumb)
  local v
  for v in PIP_INDEX_URL PIP_DEFAULT_TIMEOUT PIP_DISABLE_PIP_VERSION_CHECK; do
    [ -n "${!v:-}" ] && envs+=("$v=${!v}")
  done
  [ -f "$RFS$CA_COPY" ] && envs+=("PIP_CERT=$CA_COPY")
  unshare --mount --pid --fork --kill-child --propagation private \
    bash -c "$PIVOT" pivot "$RFS" "$1" "${envs[@]}" </dev/null
}

debootstrap_rootfs() {
  debootstrap --variant=minbase bookworm "$RFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; return 1; }
  # no service starts inside the chroot (postgresql, openvswitch): the tests start their own
  printf '#!/bin/sh\nexit 101\n' >"$RFS/usr/sbin/policy-rc.d"
  chmod 755 "$RFS/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$RFS/etc/resolv.conf"
  # the CA file pip uses here, at a path no Debian package owns (installing ca-certificates
  # inside rewrites /etc/ssl/certs/ca-certificates.crt from Debian's list alone)
  local ca="${PIP_CERT:-$(pip_conf_cert)}"
  if [ -n "$ca" ] && [ -f "$ca" ]; then cp "$ca" "$RFS$CA_COPY"; fi
}

install_git_make() { in_chroot "apt-get update -qq && apt-get install -y -qq --no-install-recommends git make >/dev/null"; }

clone_head() {
  git -C "$ROOT" rev-parse HEAD
  git clone -q --no-local "$ROOT" "$RFS/root/mltcp"
  git -C "$RFS/root/mltcp" checkout -q "$(git -C "$ROOT" rev-parse HEAD)"
  local t
  for t in "$ROOT"/../shared/tools/p4tools-*.tar.gz; do
    [ -f "$t" ] && mkdir -p "$RFS/root/shared/tools" && cp "$t" "$RFS/root/shared/tools/"
  done
  return 0
}

step debootstrap debootstrap_rootfs
step "apt-get install git make" install_git_make
step clone clone_head
step "make demo" in_chroot "cd /root/mltcp && make demo"
[ "$DEMO_ONLY" = 1 ] || step "make test" in_chroot "cd /root/mltcp && make test"

echo "=== times"
for name in debootstrap "apt-get install git make" clone "make demo" "make test"; do
  [ -n "${TOOK[$name]:-}" ] && printf '%-26s %d min %02d s\n' "$name" $((TOOK[$name] / 60)) $((TOOK[$name] % 60))
done
exit 0
