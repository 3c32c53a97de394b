#!/usr/bin/env bash
# Every check CI runs: lint, syntax, unit tests and the molecule scenarios
# (real Debian 12 systemd nodes in Docker). Ends with pytest's summary line.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
bash scripts/bootstrap.sh
export PATH="${repo}/.venv/bin:${PATH}"

echo "== ruff"
ruff check .
echo "== ansible-lint (production profile)"
ansible-lint
echo "== ansible-playbook --syntax-check"
ansible-playbook --syntax-check -i inventory/v100-hosts.yml site.yml
echo "== pytest (unit, integration, molecule)"
exec pytest "$@"
