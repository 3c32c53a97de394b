#!/usr/bin/env bash
# TEST DATA ONLY. Builds local, signed apt repositories of PLACEHOLDER packages that carry real
# package names and versions, so the roles' repository, key, pin and hold logic runs for real
# where NVIDIA's and Docker's repositories cannot be reached. Nothing here is NVIDIA software.
#
# Usage:
#   build.sh OUTDIR                       the toolkit repository (flat): OUTDIR/{*.deb,Packages,
#                                         InRelease,Release.gpg,key.asc,key.gpg,key.fingerprint}
#   build.sh OUTDIR --docker-ce DOCKERDIR a Docker-style repository (dists/bookworm/stable) of
#                                         docker-ce, docker-ce-cli and containerd.io, repacked from
#                                         Debian's docker.io, containerd and runc (a working engine
#                                         under Docker's package names), signed with OUTDIR's key
#   build.sh OUTDIR --publish-toolkit V   add toolkit version V to the existing repository and sign
#   build.sh OUTDIR --publish-driver V    add driver-family placeholders at version V (a "newer
#                                         point release") and sign again with the same key
# Toolkit versions 1.17.7-1, 1.17.8-1 and 1.17.9-1, so a pin to 1.17.8-1 is distinguishable from
# "latest". The signing key lives next to OUTDIR (OUTDIR.gnupg), never inside what ships.
set -euo pipefail

out="${1:?usage: build.sh OUTDIR [--docker-ce DIR | --publish-toolkit V | --publish-driver V]}"
shift
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
export GNUPGHOME="${out}.gnupg"

# package name -> Depends (VERSION is replaced by the package's own version).
declare -A depends=(
  [libnvidia-container1]=""
  [libnvidia-container-tools]="libnvidia-container1 (= VERSION)"
  [nvidia-container-toolkit-base]=""
  [nvidia-container-toolkit]="nvidia-container-toolkit-base (= VERSION), libnvidia-container-tools (= VERSION)"
)
# The Debian 12 driver family the nvidia_driver role installs (published only mid-test, as a
# newer point release that must not be installed).
driver_family=(nvidia-kernel-dkms nvidia-kernel-support nvidia-smi libcuda1 libnvidia-ml1
  nvidia-alternative firmware-nvidia-gsp libnvidia-ptxjitcompiler1 nvidia-persistenced)

build_deb() {
  local name="$1" version="$2" deps="${3:-}" root="${work}/${1}_${2}"
  mkdir -p "${root}/DEBIAN" "${root}/usr/share/doc/${name}"
  {
    echo "Package: ${name}"
    echo "Version: ${version}"
    echo "Architecture: all"
    echo "Maintainer: onecat test data <noreply@example.invalid>"
    [ -n "${deps}" ] && echo "Depends: ${deps//VERSION/${version}}"
    echo "Section: misc"
    echo "Priority: optional"
    echo "Description: TEST DATA - placeholder for ${name} ${version}"
    echo " Placeholder package built by onecat tests/apt_repo/build.sh. It carries the"
    echo " real package name and version only; it contains no NVIDIA or Docker software."
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

build_toolkit() {
  local version name
  for version in "$@"; do
    for name in "${!depends[@]}"; do
      build_deb "${name}" "${version}" "${depends[${name}]}"
    done
  done
}

# Release file for the Packages files under $1, written to $1/Release (relative paths).
write_release() {
  local dir="$1" suite="$2" label="$3"
  (
    cd "${dir}"
    {
      echo "Origin: onecat-test-data"
      echo "Label: ${label} (TEST DATA)"
      echo "Suite: ${suite}"
      echo "Codename: ${suite}"
      echo "Date: $(LC_ALL=C date -Ru)"
      echo "Architectures: all amd64"
      [ "${suite}" = stable ] || echo "Components: stable"
      echo "SHA256:"
      find . -name 'Packages*' -type f | sed 's|^\./||' | sort | while read -r f; do
        printf ' %s %s %s\n' "$(sha256sum "${f}" | cut -d' ' -f1)" "$(stat -c %s "${f}")" "${f}"
      done
    } >Release
    rm -f InRelease Release.gpg
    gpg --batch --quiet --clearsign -o InRelease Release 2>/dev/null
    gpg --batch --quiet --armor --detach-sign -o Release.gpg Release 2>/dev/null
  )
}

sign_flat() {
  (cd "${out}" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages \
    && gzip -9nc Packages >Packages.gz)
  write_release "${out}" stable "onecat placeholder NVIDIA packages"
}

ensure_key() {
  if [ ! -d "${GNUPGHOME}" ]; then
    # A throwaway signing key, generated now, to exercise the roles' key handling.
    mkdir -m 0700 "${GNUPGHOME}"
    gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
      --quick-generate-key "onecat test apt repository <noreply@example.invalid>" ed25519 sign never
  fi
  gpg --batch --quiet --armor --export >"${out}/key.asc"
  gpg --batch --quiet --export >"${out}/key.gpg"
  gpg --batch --with-colons --fingerprint | awk -F: '/^fpr:/ {print $10; exit}' >"${out}/key.fingerprint"
}

# docker-ce, docker-ce-cli, containerd.io repacked from Debian's docker.io, containerd, runc.
build_docker_ce() {
  local dir="$1" cache="${ONECAT_CACHE_DIR:-/var/cache/onecat}/debs"
  mkdir -p "${cache}" "${dir}"
  dir="$(cd "${dir}" && pwd)"
  (cd "${cache}" && apt-get download docker.io containerd runc >/dev/null 2>&1) || true
  local dockerio containerd runc
  dockerio="$(ls -t "${cache}"/docker.io_*.deb | head -n1)"
  containerd="$(ls -t "${cache}"/containerd_*.deb | head -n1)"
  runc="$(ls -t "${cache}"/runc_*.deb | head -n1)"
  local pool="${dir}/pool/stable"
  local stamp="${pool}/.built-from"
  local inputs
  inputs="$(basename -a "${dockerio}" "${containerd}" "${runc}" | tr '\n' ' ')"
  if [ ! -f "${stamp}" ] || [ "$(cat "${stamp}")" != "${inputs}" ]; then
    rm -rf "${pool}" && mkdir -p "${pool}"
    # docker-ce: Debian's engine under Docker's name, depending on containerd.io.
    dpkg-deb -R "${dockerio}" "${work}/docker-ce"
    python3 - "${work}/docker-ce/DEBIAN/control" <<'EOF'
import re, sys
path = sys.argv[1]
fields = {}
order = []
for block in re.split(r"\n(?=\S)", open(path).read().strip()):
    key, _, value = block.partition(":")
    fields[key] = value.strip()
    order.append(key)
deps = [d.strip() for d in fields["Depends"].split(",")]
deps = [d for d in deps if not d.startswith(("containerd", "runc"))]
fields["Depends"] = ", ".join(deps + ["containerd.io (>= 1.6)", "docker-ce-cli"])
fields["Package"] = "docker-ce"
fields["Version"] = "5:20.10.24~3-0~debian-bookworm"
fields["Conflicts"] = "docker.io, docker-engine, docker"
fields["Replaces"] = "docker.io, docker-engine"
fields["Description"] = ("TEST DATA - Debian's docker.io repacked as docker-ce\n"
                         " Placeholder built by onecat tests/apt_repo/build.sh.")
for key in ("Built-Using", "Source", "Recommends", "Suggests"):
    fields.pop(key, None)
with open(path, "w") as f:
    for key in order:
        if key in fields:
            f.write(f"{key}: {fields[key]}\n")
EOF
    dpkg-deb -Zgzip -z1 --root-owner-group -b "${work}/docker-ce" "${pool}/docker-ce_amd64.deb" >/dev/null
    # containerd.io: containerd and runc in one package, as Docker ships them.
    dpkg-deb -R "${containerd}" "${work}/containerd.io"
    dpkg-deb -x "${runc}" "${work}/containerd.io"
    rm -f "${work}/containerd.io/DEBIAN/md5sums"
    cat >"${work}/containerd.io/DEBIAN/control" <<'EOF'
Package: containerd.io
Version: 1.6.20-1
Architecture: amd64
Maintainer: onecat test data <noreply@example.invalid>
Depends: libc6 (>= 2.34), libseccomp2 (>= 2.5.0)
Provides: containerd, runc
Conflicts: containerd, runc
Replaces: containerd, runc
Section: admin
Priority: optional
Description: TEST DATA - Debian's containerd and runc repacked as containerd.io
 Placeholder built by onecat tests/apt_repo/build.sh.
EOF
    dpkg-deb -Zgzip -z1 --root-owner-group -b "${work}/containerd.io" "${pool}/containerd.io_amd64.deb" >/dev/null
    mkdir -p "${work}/cli/DEBIAN"
    printf 'Package: docker-ce-cli\nVersion: 5:20.10.24~3-0~debian-bookworm\nArchitecture: amd64\nMaintainer: onecat test data <noreply@example.invalid>\nDescription: TEST DATA - placeholder (the CLI is in the docker-ce placeholder)\n' \
      >"${work}/cli/DEBIAN/control"
    dpkg-deb --root-owner-group -b "${work}/cli" "${pool}/docker-ce-cli_amd64.deb" >/dev/null
    echo "${inputs}" >"${stamp}"
  fi
  local bin="${dir}/dists/bookworm/stable/binary-amd64"
  mkdir -p "${bin}"
  (cd "${dir}" && dpkg-scanpackages --multiversion pool /dev/null 2>/dev/null >"${bin}/Packages")
  gzip -9nc "${bin}/Packages" >"${bin}/Packages.gz"
  write_release "${dir}/dists/bookworm" bookworm "onecat placeholder Docker packages"
}

case "${1:-}" in
  "")
    rm -f "${out}"/*.deb
    ensure_key
    build_toolkit 1.17.7-1 1.17.8-1 1.17.9-1
    sign_flat
    ;;
  --docker-ce)
    # Signed with the key of OUTDIR's repository (built first).
    ensure_key
    build_docker_ce "${2:?--docker-ce needs a directory}"
    ;;
  --publish-toolkit)
    build_toolkit "${2:?--publish-toolkit needs a version}"
    sign_flat
    ;;
  --publish-driver)
    for name in "${driver_family[@]}"; do
      build_deb "${name}" "${2:?--publish-driver needs a version}"
    done
    sign_flat
    ;;
  *)
    echo "build.sh: unknown option $1" >&2
    exit 2
    ;;
esac
echo "${out}"
