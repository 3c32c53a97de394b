#!/usr/bin/env bash
# Build the Debian 12 systemd node image that molecule boots as a simulated
# fleet node. No registry can be reached, so the root filesystem comes from
# Debian's archive through debootstrap and is turned into an image with
# `docker import`. The tag carries a hash of this script and its package list:
# a second run on the same machine reuses the image.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="$(bash "${here}/../lib/debian-mirror.sh")"
suite="bookworm"
repo="${ONECAT_NODE_IMAGE_REPO:-onecat/debian12-systemd}"
packages="$(grep -v '^#' "${here}/packages.txt" | xargs | tr ' ' ',')"
hash="$(cat "${here}/build.sh" "${here}/packages.txt" | sha256sum | cut -c1-12)"
tag="${repo}:${hash}"

if docker image inspect "${tag}" >/dev/null 2>&1; then
  echo "${tag}"
  exit 0
fi

command -v debootstrap >/dev/null || {
  echo "build.sh: debootstrap is missing; install it with 'apt-get install debootstrap'" >&2
  exit 2
}

work="$(mktemp -d /var/tmp/onecat-node-image.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
root="${work}/root"

# Downloaded .debs are kept between builds on this machine.
cache="${ONECAT_CACHE_DIR:-/var/cache/onecat}/debootstrap"
mkdir -p "${cache}"

echo "build.sh: debootstrapping ${suite} into ${root} (takes a few minutes)" >&2
debootstrap --variant=minbase --include="${packages}" \
  --components=main,contrib,non-free,non-free-firmware \
  --cache-dir="${cache}" "${suite}" "${root}" "${mirror}" >"${work}/debootstrap.log" 2>&1 || {
  tail -n 30 "${work}/debootstrap.log" >&2
  exit 1
}

cat >"${root}/etc/apt/sources.list" <<SOURCES
deb ${mirror} ${suite} main contrib non-free non-free-firmware
deb ${mirror} ${suite}-updates main contrib non-free non-free-firmware
deb ${mirror%/debian}/debian-security ${suite}-security main contrib non-free non-free-firmware
SOURCES

# A container has no consoles, no udev and no hardware clock to wait for.
for unit in getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-remount-fs.service \
  systemd-firstboot.service sys-kernel-debug.mount dev-hugepages.mount; do
  ln -sf /dev/null "${root}/etc/systemd/system/${unit}"
done
echo "onecat-node" >"${root}/etc/hostname"
: >"${root}/etc/machine-id"
# A real server has package lists: fetch them now, as its installer would have.
chroot "${root}" apt-get update -qq >"${work}/apt-update.log" 2>&1 || {
  tail -n 20 "${work}/apt-update.log" >&2
  exit 1
}
rm -f "${root}/var/cache/apt/archives/"*.deb

tar -C "${root}" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  - "${tag}" >/dev/null
docker tag "${tag}" "${repo}:latest"
echo "${tag}"
