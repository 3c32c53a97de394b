#!/usr/bin/env bash
# Print the Debian mirror this machine's apt already uses (the first non-security
# "…/debian" URI in its sources), so image builds fetch from where apt does.
# ONECAT_DEBIAN_MIRROR overrides it.
set -euo pipefail
if [ -n "${ONECAT_DEBIAN_MIRROR:-}" ]; then
  echo "${ONECAT_DEBIAN_MIRROR}"
  exit 0
fi
mirror="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | grep -v '^\s*#' | grep -o -E 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ' || true)"
if [ -z "${mirror}" ]; then
  echo "debian-mirror.sh: no Debian mirror in /etc/apt/sources*; set ONECAT_DEBIAN_MIRROR" >&2
  exit 2
fi
echo "${mirror%/}"
