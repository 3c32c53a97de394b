#!/usr/bin/env bash
# Stage what the simulated nodes need into one archive: recorded sysfs trees,
# the NVML test double (compiled here: the nodes share this machine's glibc)
# with its scenarios, the kernel-edge doubles, the local apt repository of
# placeholder NVIDIA packages, and the controller's extra CA certificates (this
# machine's egress may re-sign TLS; the nodes must trust what it trusts).
# The apt repository is built in WORKDIR/apt (its signing key next to it), so a
# test can publish a newer release into it later with tests/apt_repo/build.sh.
set -euo pipefail
project="$1"
out="$2"
workdir="${3:-$(dirname "$2")}"
stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
cp -a "${project}/tests/fixtures/sysfs" "${stage}/sysfs"
python3 "${project}/tests/nvml_double/build_double.py" "${stage}/nvml" >/dev/null
cp -a "${project}/tests/nvml_double/scenarios" "${stage}/nvml/scenarios"
rm -rf "${workdir}/apt" "${workdir}/apt.gnupg"
bash "${project}/tests/apt_repo/build.sh" "${workdir}/apt" >/dev/null 2>&1
cp -a "${workdir}/apt" "${stage}/apt"
cp -a "${project}/tests/kernel_doubles" "${stage}/kernel_doubles"
mkdir -p "${stage}/ca"
cp /usr/local/share/ca-certificates/*.crt "${stage}/ca/" 2>/dev/null || true
tar -czf "${out}" -C "${stage}" .
