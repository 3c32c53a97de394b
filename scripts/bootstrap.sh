#!/usr/bin/env bash
# Install what onecat's tests and its simulated fleet need on a Debian 12 machine
# (the simulated nodes are Debian 12 and run the NVML test double compiled here), as root: Debian packages, a running Docker daemon, the project venv
# and the node image. Safe to run again: each step checks before it acts.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  log "run me as root: I install Debian packages and start dockerd"
  exit 2
fi

# systemd: its systemd-analyze verifies the rendered serve unit (tests/roles/test_serve_role.py).
# docker-registry: the local registry `onecat engine lock` reads base digests from in the tests.
# ufw: enabled only inside a test's own namespaces (tests/integration/test_gateway_node_firewall.py);
# installed, it stays off here (ENABLED=no).
packages=(docker.io debootstrap python3-venv gcc libc6-dev tar gzip ca-certificates git rsync
  dpkg-dev gnupg haproxy systemd docker-registry ufw)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("${pkg}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ]; then
    log "starting docker through systemd"
    systemctl start docker
  else
    log "starting dockerd (no systemd here); log in /var/log/onecat-dockerd.log"
    nohup dockerd >/var/log/onecat-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/onecat-dockerd.log"; exit 1; }
fi

if [ ! -x .venv/bin/python ]; then
  log "creating the project venv in .venv"
  python3 -m venv .venv
fi
stamp=".venv/.onecat-installed"
if [ ! -f "${stamp}" ] || [ pyproject.toml -nt "${stamp}" ] || [ constraints.txt -nt "${stamp}" ]; then
  log "installing onecat and its test tools into .venv (pinned by constraints.txt)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[test]'
  touch "${stamp}"
fi

# Prometheus and Alertmanager as Debian 12 ships them (the monitoring stage installs these same
# packages on the monitoring hosts): promtool and amtool check and unit-test the rendered rules
# and configurations, and the integration tests run the real servers on loopback. Unpacked into
# .cache/prometheus, not installed: installing would start both daemons on this machine.
prom_root=".cache/prometheus/root"
if [ ! -x "${prom_root}/usr/bin/promtool" ] || [ ! -x "${prom_root}/usr/bin/amtool" ]; then
  log "unpacking Debian's prometheus and prometheus-alertmanager into ${prom_root}"
  mkdir -p .cache/prometheus/debs
  (cd .cache/prometheus/debs && apt-get download -q prometheus prometheus-alertmanager 2>/dev/null) \
    || { apt-get update -qq && (cd .cache/prometheus/debs && apt-get download -q prometheus prometheus-alertmanager); }
  for deb in .cache/prometheus/debs/*.deb; do dpkg-deb -x "${deb}" "${prom_root}"; done
fi

# The node image, and the stand-in for the engine's CUDA base (every scenario's prepare asks for
# it; scenarios that start side by side would otherwise each debootstrap it). Each is a
# debootstrap that waits on the mirror about as much as it computes: both at once.
log "building (or reusing) the Debian 12 systemd node image and the engine base's stand-in"
logs="$(mktemp -d)"
bash tools/node-image/build.sh >/dev/null 2>"${logs}/node-image.log" &
node_image=$!
bash tools/engine-base-image/build.sh >/dev/null 2>"${logs}/engine-base.log" &
engine_base=$!
failed=0
wait "${node_image}" || { cat "${logs}/node-image.log" >&2; log "building the node image failed"; failed=1; }
wait "${engine_base}" || { cat "${logs}/engine-base.log" >&2; log "building the engine base's stand-in failed"; failed=1; }
rm -rf "${logs}"
exit "${failed}"
