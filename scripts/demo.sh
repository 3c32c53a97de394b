#!/usr/bin/env bash
# The main job with zero hardware: bring up the simulated 2xV100 fleet (three
# Debian 12 systemd nodes in Docker, one with a bad card) and roll site.yml out
# to it. `scripts/demo.sh down` destroys the fleet again.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
if [ "${1:-up}" = "down" ]; then
  if [ ! -x .venv/bin/onecat ]; then
    echo "demo.sh: no .venv here, so no simulated fleet was brought up from this checkout" >&2
    exit 0
  fi
  exec .venv/bin/onecat fleet down
fi
bash scripts/bootstrap.sh
exec .venv/bin/onecat fleet up --converge
