#!/usr/bin/env bash
# The main job with zero hardware: bring up the simulated 2xV100 fleet in
# Docker and run the real rollout (site.yml) against it.
# `scripts/demo.sh down` destroys the fleet again.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
bash scripts/bootstrap.sh
if [ "${1:-up}" = "down" ]; then
  exec .venv/bin/onecat fleet down
fi
exec .venv/bin/onecat fleet up --converge
