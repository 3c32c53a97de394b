#!/usr/bin/env bash
# TEST DATA ONLY. Builds a local, signed, flat apt repository of PLACEHOLDER packages that carry
# the real names and versions of the four NVIDIA Container Toolkit packages, so the
# container_runtime role's repository, key, version-pin and hold logic runs for real where
# NVIDIA's repository cannot be reached. The packages contain no NVIDIA software: the
# "nvidia-container-runtime" they ship is a two-line wrapper around runc.
#
# Usage: build.sh OUTDIR
# Produces OUTDIR/{*.deb,Packages,Packages.gz,Release,InRelease,Release.gpg,key.asc}.
# Versions: 1.17.7-1, 1.17.8-1 and 1.17.9-1, so a pin to 1.17.8-1 is distinguishable from "latest".
set -euo pipefail

out="${1:?usage: build.sh OUTDIR}"
versions=(1.17.7-1 1.17.8-1 1.17.9-1)
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# package name -> Depends (VERSION is replaced by the package's own version).
declare -A depends=(
  [libnvidia-container1]=""
  [libnvidia-container-tools]="libnvidia-container1 (= VERSION)"
  [nvidia-container-toolkit-base]=""
  [nvidia-container-toolkit]="nvidia-container-toolkit-base (= VERSION), libnvidia-container-tools (= VERSION)"
)

build_deb() {
  local name="$1" version="$2" root="${work}/${1}_${2}"
  mkdir -p "${root}/DEBIAN" "${root}/usr/share/doc/${name}"
  {
    echo "Package: ${name}"
    echo "Version: ${version}"
    echo "Architecture: all"
    echo "Maintainer: onecat test data <noreply@example.invalid>"
    [ -n "${depends[${name}]}" ] && echo "Depends: ${depends[${name}]//VERSION/${version}}"
    echo "Section: misc"
    echo "Priority: optional"
    echo "Description: TEST DATA - placeholder for ${name} ${version}"
    echo " Placeholder package built by onecat tests/apt_repo/build.sh. It carries the"
    echo " real package name and version only; it contains no NVIDIA software."
  } >"${root}/DEBIAN/control"
  echo "onecat test data: placeholder for ${name} ${version}" >"${root}/usr/share/doc/${name}/README.test-data"
  if [ "${name}" = nvidia-container-toolkit ]; then
    # Lets `docker run --runtime=nvidia` work in a test node without GPUs.
    mkdir -p "${root}/usr/bin"
    printf '#!/bin/sh\n# onecat test data: placeholder runtime, delegates to runc.\nexec runc "$@"\n' \
      >"${root}/usr/bin/nvidia-container-runtime"
    chmod 0755 "${root}/usr/bin/nvidia-container-runtime"
  fi
  dpkg-deb --root-owner-group --build "${root}" "${out}/${name}_${version}_all.deb" >/dev/null
}

rm -f "${out}"/*.deb
for version in "${versions[@]}"; do
  for name in "${!depends[@]}"; do
    build_deb "${name}" "${version}"
  done
done

cd "${out}"
dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages
gzip -9nc Packages >Packages.gz
{
  echo "Origin: onecat-test-data"
  echo "Label: onecat placeholder NVIDIA Container Toolkit (TEST DATA)"
  echo "Suite: stable"
  echo "Codename: stable"
  echo "Date: $(LC_ALL=C date -Ru)"
  echo "Architectures: all amd64"
  echo "SHA256:"
  for f in Packages Packages.gz; do
    printf ' %s %s %s\n' "$(sha256sum "${f}" | cut -d' ' -f1)" "$(stat -c %s "${f}")" "${f}"
  done
} >Release

# A throwaway signing key, generated now, to exercise the role's key handling.
export GNUPGHOME="${work}/gnupg"
mkdir -m 0700 "${GNUPGHOME}"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
  --quick-generate-key "onecat test apt repository <noreply@example.invalid>" ed25519 sign never
gpg --batch --quiet --armor --export >key.asc
rm -f InRelease Release.gpg
gpg --batch --quiet --clearsign -o InRelease Release
gpg --batch --quiet --armor --detach-sign -o Release.gpg Release
echo "${out}"
