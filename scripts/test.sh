#!/usr/bin/env bash
# Every check CI runs: lint, syntax, unit tests and the molecule scenarios
# (real Debian 12 systemd nodes in Docker). Everything it prints also goes, time-stamped, to a
# log (ONECAT_CI_LOG, default results/ci/test-<time>.log); it ends with the table of where the
# time went (benchmarks/ci_profile.py) and then pytest's summary line again.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
log="${ONECAT_CI_LOG:-${repo}/results/ci/test-$(date -u +%Y%m%dT%H%M%SZ).log}"
mkdir -p "$(dirname "${log}")"

checks() {
  bash scripts/bootstrap.sh
  export PATH="${repo}/.venv/bin:${PATH}"
  # The real-engine tier's venv and tiny model (about a minute of CPU, tests/real_engine/engine.py)
  # are built now, in the background at the lowest priority, where ansible-lint keeps only one
  # of the cores busy; the tier's fixtures wait on the same locks or build what is missing. The
  # tier used to build them beside the scenarios' create and prepare, delaying both.
  if [ "$#" -eq 0 ] && [ "${ONECAT_REAL_ENGINE:-1}" != 0 ]; then
    nice -n 19 python tests/real_engine/engine.py >"${log%.log}.real-engine-prepare.log" 2>&1 &
  fi
  echo "== ruff"
  ruff check .
  echo "== ansible-lint (production profile)"
  ansible-lint
  echo "== ansible-playbook --syntax-check"
  ansible-playbook --syntax-check -i inventory/v100-hosts.yml site.yml
  if [ "$#" -gt 0 ]; then
    echo "== pytest ($*)"
    pytest "$@"
    return
  fi
  # The quick tests spread over one worker per core (pytest-xdist): alone, they keep one core
  # busy and wait on the rest (ansible-playbook runs, HAProxy checks, stand-in engines). They
  # run before the scenarios, not beside them: a loopback HAProxy check raced two converging
  # fleets for the CPU, and the scenarios leave no CPU to fill. Measured (docs/testing.md):
  # the two cores are saturated through the converges and about 85 % busy after, so ansible-lint
  # and the roles tests beside them, even in a CPU cgroup of their own with a small share,
  # made the scenarios about as much longer as the quick phase got shorter.
  # --durations=0 gives benchmarks/ci_profile.py each folder's test time.
  # worksteal: a worker that runs out takes tests queued for the other; with the default
  # (load), the last slow tests queued on one worker ran alone for over two minutes while the
  # other core idled.
  local workers="${ONECAT_TEST_WORKERS:-$(nproc)}" quick_rc=0
  echo "== pytest quick (unit, integration, roles, fuzz: ${workers} workers)"
  pytest -m "not molecule and not real_engine" -n "${workers}" --dist worksteal \
    --durations=0 --durations-min=0.05 || quick_rc=$?
  # The real-engine tier (tests/real_engine: upstream vLLM's CPU build, one server) goes with
  # the scenarios: tests/conftest.py runs it first, while they create and converge, before
  # fleet's verify (docs/testing.md has why and what it costs).
  echo "== pytest molecule (the scenarios, side by side, and the real-engine tier)"
  pytest -m "molecule or real_engine" --durations=0 --durations-min=1
  return "${quick_rc}"
}

# Each line passes through unchanged and lands in the log with the time it arrived. A machine
# without python3 yet (bootstrap installs it) gets the same from bash, a second at a time.
stamp() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -u benchmarks/ci_profile.py --tee "${log}"
  else
    : >"${log}"
    while IFS= read -r line || [ -n "${line}" ]; do
      printf '%s\n' "${line}"
      printf '%(%s)T.0 %s\n' -1 "${line}" >>"${log}"
    done
  fi
}

set +e
(set -euo pipefail; checks "$@") 2>&1 | stamp
rc=${PIPESTATUS[0]}
set -e

echo
echo "== where the time went (python3 benchmarks/ci_profile.py ${log})"
python3 benchmarks/ci_profile.py "${log}" || echo "(no profile: see ${log})"
# CI reads the runner's closing lines: each pytest run's summary goes last again, then their
# sum on one plain line.
python3 benchmarks/ci_profile.py --counts "${log}" || true
exit "${rc}"
