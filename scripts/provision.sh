#!/usr/bin/env bash
# provision.sh — the one and only install path for zlab (README, CI and the Vagrantfile call it).
#
# Idempotent: a second run changes nothing and finishes in seconds. Every step prints what it
# did; any failing step aborts with a message naming it. Must run as root.
#
#   bash scripts/provision.sh            # the core: apt packages, (re)start OVS, build .venv and .venv-ryu
#   bash scripts/provision.sh --referee  # the core plus the optional ns-3 referee (libns3-dev, .referee/)
#   bash scripts/provision.sh --services # only (re)start the services (OVS) the lab needs
#
# Why each step exists is in the comment above it; see docs/getting-started.md.
set -euo pipefail
# Root is needed (Mininet, OVS, apt). As a sudo user, re-run through sudo; as root (a fresh Debian
# machine has no sudo), just run.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "$0: run as root (no sudo on this machine)" >&2; exit 1; }
  exec sudo -E bash "$0" "$@"
fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
STATE_DIR="${ZLAB_STATE_DIR:-/var/lib/zlab}"
SOCK_BUF_BYTES=8388608          # 8 MiB: below this OVS userspace ports drop silently (platform notes)
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
APT_PACKAGES=(
  mininet openvswitch-switch openvswitch-common iperf3 libiperf0 ethtool iputils-ping tcpdump
  tshark iproute2 nftables procps psmisc python3-venv python3-dev build-essential vagrant git
  clang llvm libbpf-dev bpftool
)
CHANGES=0
T0=$(date +%s)

say()    { printf '[provision] %s\n' "$*"; }
changed(){ CHANGES=$((CHANGES + 1)); printf '[provision] changed: %s\n' "$*"; }
die()    { printf '[provision] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "step at line $LINENO exited with status $?"' ERR

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo bash scripts/provision.sh)"

ONLY_SERVICES=0
REFEREE=0
case "${1:-}" in
  --services) ONLY_SERVICES=1 ;;
  --referee) REFEREE=1 ;;
  ""|--all) ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) die "unknown option '$1' (valid: --services, --referee, --all, --help)" ;;
esac

install_apt_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "apt: all ${#APT_PACKAGES[@]} packages present"; return; fi
  say "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer for it so the install never blocks.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  changed "apt packages: ${missing[*]}"
}

# The kernel's default socket buffers size every packet socket OVS userspace opens per port.
# They must be large before ovs-vswitchd opens its ports, or queues vanish into hidden drops.
set_socket_buffers() {
  mkdir -p /etc/sysctl.d
  local conf=/etc/sysctl.d/90-zlab.conf
  local want="net.core.wmem_default = $SOCK_BUF_BYTES
net.core.rmem_default = $SOCK_BUF_BYTES
net.core.wmem_max = $SOCK_BUF_BYTES
net.core.rmem_max = $SOCK_BUF_BYTES"
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" > "$conf"; changed "$conf"
  fi
  local key
  for key in wmem_default rmem_default wmem_max rmem_max; do
    if [ "$(cat /proc/sys/net/core/$key)" -lt "$SOCK_BUF_BYTES" ]; then
      sysctl -q -w "net.core.$key=$SOCK_BUF_BYTES"; changed "net.core.$key=$SOCK_BUF_BYTES"
      BUFFERS_RAISED=1
    fi
  done
}

# Which datapath the lab uses: the kernel one where the openvswitch module is (or can be)
# loaded, the userspace one (netdev) elsewhere. Recorded for `zlab doctor` and the builder.
detect_datapath() {
  if [ -d /sys/module/openvswitch ] || modprobe -q openvswitch 2>/dev/null; then
    echo system
  else
    echo netdev
  fi
}

ovs_running() { ovs-vsctl --timeout=5 show >/dev/null 2>&1; }
# The daemons outlive this script, so they start with only stdin, stdout and stderr: otherwise they
# keep whatever the caller had open for their whole life (measured: `flock LOCK bash provision.sh`
# left ovsdb-server and ovs-vswitchd holding LOCK, and every later `flock LOCK` waited on them).
without_inherited_fds() {
  ( for fd in /proc/self/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi; done; exec "$@" )
}
vswitchd_pid() { cat /var/run/openvswitch/ovs-vswitchd.pid 2>/dev/null || true; }

# OVS without systemd: ovs-ctl starts ovsdb-server and ovs-vswitchd directly. A daemon that was
# started before the buffers were raised (or by someone else, unknown) is restarted once.
start_ovs() {
  local datapath; datapath=$(detect_datapath)
  local stamp="$STATE_DIR/ovs-started.json" pid recorded=""
  mkdir -p "$STATE_DIR"
  pid=$(vswitchd_pid)
  [ -f "$stamp" ] && recorded=$(sed -n 's/.*"vswitchd_pid": *\([0-9]*\).*/\1/p' "$stamp")
  if ovs_running && [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$pid" = "$recorded" ] \
     && [ "${BUFFERS_RAISED:-0}" -eq 0 ]; then
    say "ovs: running (pid $pid) with ${SOCK_BUF_BYTES}-byte socket buffers"
  else
    if ovs_running || { [ -n "$pid" ] && [ -d "/proc/$pid" ]; }; then
      say "ovs: running without a zlab start record or with small buffers: restarting"
      "$OVS_CTL" stop >/dev/null 2>&1 || true
    fi
    # Bridges left in the db by a killed run are not swept here: `zlab clean` removes the ones
    # zlab recorded, and nobody else's.
    without_inherited_fds "$OVS_CTL" start --system-id=random --no-mlockall 2>&1 | grep -v -i 'ulimit\|mlockall\|kernel module' || true
    ovs_running || die "ovs-vswitchd did not come up (see /var/log/openvswitch/)"
    pid=$(vswitchd_pid)
    changed "ovs started (pid $pid, datapath $datapath)"
  fi
  printf '{"vswitchd_pid": %s, "datapath": "%s", "sock_buf_bytes": %s}\n' \
    "$pid" "$datapath" "$SOCK_BUF_BYTES" > "$stamp.tmp"
  if ! cmp -s "$stamp.tmp" "$stamp"; then mv "$stamp.tmp" "$stamp"; else rm -f "$stamp.tmp"; fi
  printf '%s\n' "$datapath" > "$STATE_DIR/datapath.tmp"
  if ! cmp -s "$STATE_DIR/datapath.tmp" "$STATE_DIR/datapath"; then
    mv "$STATE_DIR/datapath.tmp" "$STATE_DIR/datapath"; changed "datapath recorded: $datapath"
  else rm -f "$STATE_DIR/datapath.tmp"; fi
}

# pip, minus the warnings this machine's pip.conf prints for local wheel folders it lacks.
pip_quiet() {
  "$VENV/bin/python" -m pip -q --disable-pip-version-check "$@" 2>&1 | { grep -v "WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}

# A venv on Debian's Python (which Debian's Mininet was built for). Mininet comes from Debian
# (PyPI's is older and ships no mnexec); the venv sees only that one package through a .pth file.
build_venv() {
  local py=/usr/bin/python3
  if [ ! -x "$VENV/bin/python" ]; then
    "$py" -m venv "$VENV"; changed "venv $VENV"
  fi
  local site; site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  local shim="$VENV/debian-mininet"
  mkdir -p "$shim"
  if [ "$(readlink "$shim/mininet" 2>/dev/null)" != /usr/lib/python3/dist-packages/mininet ]; then
    ln -sfn /usr/lib/python3/dist-packages/mininet "$shim/mininet"; changed "mininet link"
  fi
  if [ "$(cat "$site/zlab-debian-mininet.pth" 2>/dev/null)" != "$shim" ]; then
    printf '%s\n' "$shim" > "$site/zlab-debian-mininet.pth"; changed "mininet .pth"
  fi
  local want; want=$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)
  if [ "$(cat "$VENV/.zlab-deps" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/zlab" --help >/dev/null 2>&1; then
    say "pip: installing pinned dependencies (a few minutes on a fresh machine)"
    pip_quiet install --upgrade pip==24.3.1
    pip_quiet install -e "$REPO[test,bench]"
    printf '%s\n' "$want" > "$VENV/.zlab-deps"; changed "python dependencies"
  else
    say "pip: dependencies match pyproject.toml"
  fi
  "$VENV/bin/python" -c 'import mininet.net, os_ken, scapy, pandas, pyarrow, importlinter' \
    || die "venv imports failed"
}

# Real Ryu, kept apart from os-ken (both provide the ryu-style module layout), pinned in
# scripts/ryu-requirements.txt: the last release, 4.34, on Debian's Python 3.11 needs eventlet 0.33.3
# (0.30 fails on 3.11; newer ones drop a name Ryu imports, which controllers/launch_ryu.py defines) and
# dnspython >= 2.2. Ryu's setup.py needs a setuptools older than 67 to build, so it builds without
# isolation against a pinned one. Only the app's imports live here; the repo is on PYTHONPATH when it runs.
RYU_VENV="$REPO/.venv-ryu"
RYU_REQS="$REPO/scripts/ryu-requirements.txt"
ryu_pip() {
  "$RYU_VENV/bin/python" -m pip -q --disable-pip-version-check "$@" 2>&1 | { grep -v "WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}
ryu_imports() {
  "$RYU_VENV/bin/python" -c 'import eventlet.wsgi; eventlet.wsgi.ALREADY_HANDLED = object(); import ryu.cmd.manager, ryu.ofproto.ofproto_v1_3_parser' 2>/dev/null
}
build_ryu_venv() {
  if [ ! -x "$RYU_VENV/bin/python" ]; then
    /usr/bin/python3 -m venv "$RYU_VENV"; changed "venv $RYU_VENV"
  fi
  local want; want=$(sha256sum "$RYU_REQS" | cut -d' ' -f1)
  if [ "$(cat "$RYU_VENV/.zlab-deps" 2>/dev/null)" != "$want" ] || ! ryu_imports; then
    say "pip: installing Ryu into $RYU_VENV (scripts/ryu-requirements.txt)"
    ryu_pip install --upgrade pip==24.3.1 setuptools==58.2.0 wheel==0.45.1
    ryu_pip install --no-build-isolation -r "$RYU_REQS"
    printf '%s\n' "$want" > "$RYU_VENV/.zlab-deps"; changed "ryu dependencies"
  else
    say "pip: the Ryu environment matches scripts/ryu-requirements.txt"
  fi
  ryu_imports || die "the Ryu environment ($RYU_VENV) does not import ryu"
}

# The optional ns-3 referee (`zlab referee`): Debian's ns-3 3.37 libraries and headers (~80 MB) and
# one C++ program compiled from testbed/referee/zlab_referee.cc into .referee/ (rebuilt when its
# source changes). Also SimGrid's Python binding (python3-simgrid, system Python only), the flow
# engine's independent oracle (scripts/bench/flowsim_simgrid.py, tests/unit/test_flowsim_simgrid.py).
# Kept out of the core so that a lab-only install stays small.
install_referee() {
  local p missing=()
  for p in libns3-dev g++ python3-simgrid; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt: installing ${missing[*]} (the ns-3 referee, the SimGrid oracle)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    changed "apt packages: ${missing[*]}"
  else
    say "apt: libns3-dev, g++, python3-simgrid present"
  fi
  local out
  out=$("$VENV/bin/python" -c 'from testbed.referee import binary; p = binary.build(log=lambda *a: print(*a)); print("built:", p)') \
    || die "compiling the ns-3 referee failed"
  say "referee: $(printf '%s' "$out" | tail -1)"
}

# The emulation's ECN marker pins its BPF program and maps under /sys/fs/bpf/zlab/<run>; the
# bpf filesystem is not mounted on every machine (it is not on a minimal Debian VM).
mount_bpffs() {
  if grep -qs '^bpf /sys/fs/bpf bpf ' /proc/mounts; then say "bpffs: mounted"; return; fi
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf || die "mounting the bpf filesystem at /sys/fs/bpf"
  changed "mounted bpffs at /sys/fs/bpf"
}

# Compile the ECN marker (clang, libbpf-dev) so the first run does not, and so a broken
# toolchain fails here rather than in a run.
build_ecn_marker() {
  "$VENV/bin/python" -c 'from testbed.emulation import ecn; print("built:", ecn.build())' >/dev/null \
    || die "compiling the ECN marker (testbed/emulation/bpf/ecn_marker.bpf.c) failed"
  say "ECN marker: built"
}

if [ "$ONLY_SERVICES" -eq 0 ]; then install_apt_packages; fi
set_socket_buffers
mount_bpffs
start_ovs
if [ "$ONLY_SERVICES" -eq 0 ]; then build_venv; build_ryu_venv; build_ecn_marker; fi
if [ "$REFEREE" -eq 1 ]; then install_referee; fi
say "done in $(( $(date +%s) - T0 )) s, $CHANGES changes"
