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

# A small CPU share for this shell and what it starts: a CPU cgroup of its own (cgroup v1
# cpu.shares 128, v2 cpu.weight 5). nice alone is not enough: the scheduler shares the CPU
# between cgroups first, and Docker puts every node (and every container inside the nodes) under
# one cgroup, /docker, that counts as one process; the host's processes, niced or not, each count
# as one beside it. Measured: at nice 10 the unit, roles and fuzz tests slowed molecule/default's
# prepare from 88 s to 206 s and its converge from 414 s to 568 s. Where no cgroup can be made,
# nice 19 alone.
small_cpu_share() {
  local v1=/sys/fs/cgroup/cpu v2=/sys/fs/cgroup
  if [ -d "${v1}" ] && mkdir -p "${v1}/onecat-beside" 2>/dev/null \
      && echo 128 >"${v1}/onecat-beside/cpu.shares" 2>/dev/null \
      && echo "${BASHPID}" >"${v1}/onecat-beside/cgroup.procs" 2>/dev/null; then
    echo "(a CPU cgroup with cpu.shares 128: ${v1}/onecat-beside)"
  elif [ -f "${v2}/cgroup.controllers" ] && grep -qw cpu "${v2}/cgroup.subtree_control" \
      && mkdir -p "${v2}/onecat-beside" 2>/dev/null \
      && echo 5 >"${v2}/onecat-beside/cpu.weight" 2>/dev/null \
      && echo "${BASHPID}" >"${v2}/onecat-beside/cgroup.procs" 2>/dev/null; then
    echo "(a CPU cgroup with cpu.weight 5: ${v2}/onecat-beside)"
  else
    echo "(no CPU cgroup could be made here: nice 19 only)"
  fi
  renice -n 19 -p "${BASHPID}" >/dev/null
}

# What runs beside the scenarios, with a small CPU share (above): ansible-lint and the roles
# tests (ansible-playbook --check against localhost: no peer on a short clock, only generous
# timeouts against a hang). The scenarios leave about a sixth of the two cores idle once they are
# past their converges (waits on gates, burn-in load, watch timers, the fleet's last tests
# alone); these take that. Its output goes to a file, printed after the scenarios.
beside() {
  local workers="$1" started="${SECONDS}" rc=0
  small_cpu_share
  echo "== ansible-lint (production profile; beside the scenarios)"
  ansible-lint || rc=$?
  echo "== pytest roles (beside the scenarios: ${workers} workers)"
  pytest -m "not molecule" tests/roles -n "${workers}" --dist worksteal --durations=0 \
    --durations-min=0.05 || rc=$?
  echo "(ansible-lint and the roles tests took $((SECONDS - started)) s beside the scenarios)"
  return "${rc}"
}

checks() {
  bash scripts/bootstrap.sh
  export PATH="${repo}/.venv/bin:${PATH}"
  echo "== ruff"
  ruff check .
  echo "== ansible-playbook --syntax-check"
  ansible-playbook --syntax-check -i inventory/v100-hosts.yml site.yml
  if [ "$#" -gt 0 ]; then
    echo "== ansible-lint (production profile)"
    ansible-lint
    echo "== pytest ($*)"
    pytest "$@"
    return
  fi
  # The integration, unit and fuzz tests run first, alone, one worker per core (pytest-xdist):
  # they race real HAProxy checks, stand-in engines and ansible-playbook runs on loopback
  # against short deadlines, and a loopback agent check once lost that race to two converging
  # fleets.
  # worksteal: a worker that runs out takes tests queued for the other (with the default,
  # load, the last slow tests queued on one worker ran alone for over two minutes).
  # --durations=0 gives benchmarks/ci_profile.py each folder's test time.
  # Then the scenarios (mostly one Ansible controller each, and waits: systemd, gates, burn-in
  # load, watch timers, the fleet's last tests alone once `default` is done) leave a core idle
  # for much of their half hour: ansible-lint and the roles tests fill it, with a small CPU
  # share so that the scenarios' own timing barely moves (beside() above).
  local workers="${ONECAT_TEST_WORKERS:-$(nproc)}" rc=0 side_pid side_log
  echo "== pytest quick (integration, unit, fuzz: ${workers} workers)"
  pytest -m "not molecule" tests/integration tests/unit tests/fuzz -n "${workers}" \
    --dist worksteal --durations=0 --durations-min=0.05 || rc=$?
  side_log="$(mktemp)"
  beside "${workers}" >"${side_log}" 2>&1 &
  side_pid=$!
  echo "== pytest molecule (the scenarios, side by side; ansible-lint and the roles tests beside them)"
  pytest -m molecule || rc=$?
  wait "${side_pid}" || rc=$?
  cat "${side_log}"
  rm -f "${side_log}"
  return "${rc}"
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
