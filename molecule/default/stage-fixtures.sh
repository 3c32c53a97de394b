#!/usr/bin/env bash
# Stage what the simulated nodes need into one archive: recorded sysfs trees,
# the NVML test double (compiled here: the nodes share this machine's glibc)
# with its scenarios, the local apt repository of placeholder NVIDIA Container
# Toolkit packages, and the controller's extra CA certificates (this machine's
# egress may re-sign TLS; the nodes must trust what it trusts).
set -euo pipefail
project="$1"
out="$2"
stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
cp -a "${project}/tests/fixtures/sysfs" "${stage}/sysfs"
python3 "${project}/tests/nvml_double/build_double.py" "${stage}/nvml" >/dev/null
cp -a "${project}/tests/nvml_double/scenarios" "${stage}/nvml/scenarios"
bash "${project}/tests/apt_repo/build.sh" "${stage}/apt" >/dev/null
mkdir -p "${stage}/ca"
cp /usr/local/share/ca-certificates/*.crt "${stage}/ca/" 2>/dev/null || true
tar -czf "${out}" -C "${stage}" .
