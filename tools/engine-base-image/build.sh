#!/usr/bin/env bash
# Build a LOCAL stand-in for the engine image's base (nvidia/cuda:12.8.1-runtime-
# ubuntu24.04 in production) for tests: no registry is reachable here, so the root
# filesystem comes from Debian's archive through debootstrap (Debian 12 minbase +
# python3 + python3-venv) and becomes an image with `docker import`. The tag carries
# a hash of this script and its package list: a second run reuses the image.
# Prints the image reference on stdout.
#   ONECAT_DEBIAN_MIRROR      Debian mirror (default: the one this machine's apt uses)
#   ONECAT_ENGINE_BASE_REPO   image repository (default onecat/engine-base)
#   ONECAT_CACHE_DIR          where downloaded .debs are kept (default /var/cache/onecat)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="$(bash "$(dirname "${BASH_SOURCE[0]}")/../lib/debian-mirror.sh")"
suite="bookworm"
repo="${ONECAT_ENGINE_BASE_REPO:-onecat/engine-base}"
packages="$(grep -v '^#' "${here}/packages.txt" | xargs | tr ' ' ',')"
hash="$(cat "${here}/build.sh" "${here}/packages.txt" | sha256sum | cut -c1-12)"
tag="${repo}:${hash}"

if docker image inspect "${tag}" >/dev/null 2>&1; then
  echo "${tag}"
  exit 0
fi

command -v debootstrap >/dev/null || {
  echo "engine-base-image/build.sh: debootstrap is missing; install it with 'apt-get install debootstrap'" >&2
  exit 2
}

work="$(mktemp -d /var/tmp/onecat-engine-base.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
root="${work}/root"
# Its own .deb cache: bootstrap.sh builds this image while the node image's debootstrap runs,
# and debootstrap does not lock its cache folder.
cache="${ONECAT_CACHE_DIR:-/var/cache/onecat}/debootstrap-engine-base"
mkdir -p "${cache}"

echo "engine-base-image/build.sh: debootstrapping ${suite} minbase into ${root}" >&2
debootstrap --variant=minbase --include="${packages}" --components=main \
  --cache-dir="${cache}" "${suite}" "${root}" "${mirror}" >"${work}/debootstrap.log" 2>&1 || {
  tail -n 30 "${work}/debootstrap.log" >&2
  exit 1
}
echo "deb ${mirror} ${suite} main" >"${root}/etc/apt/sources.list"
# Smaller image: no apt lists, no downloaded packages, no docs.
rm -rf "${root}/var/lib/apt/lists/"* "${root}/var/cache/apt/archives/"*.deb \
  "${root}/usr/share/doc/"* "${root}/usr/share/man/"*

tar -C "${root}" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "${tag}" >/dev/null
docker tag "${tag}" "${repo}:latest"
echo "${tag}"
