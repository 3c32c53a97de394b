#!/usr/bin/env bash
# The main job with zero hardware, done the way a user does it on real hardware:
#   onecat fleet up                              three simulated 2xV100 nodes in Docker
#   onecat deploy -i inventory/simulated.yml     site.yml with live progress and the summary
#   one completion and a short benchmark through the gateway, `onecat status`, then the
#   fleet report.
# Every sentence at the end is computed from rollout.json and the results.
# `scripts/demo.sh down` destroys the fleet again.
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
started=$(date +%s)
bash scripts/bootstrap.sh
export PATH="${repo}/.venv/bin:${PATH}"
say() { printf '\n== %s\n' "$*"; }

say "onecat fleet up"
onecat fleet up

# A new fleet serves nobody yet: its driver and runtime stages take all three nodes in one
# batch, as the molecule scenarios do (on a serving fleet keep the default, 25 % at a time).
say "onecat deploy -i inventory/simulated.yml -e onecat_driver_batch=100%"
mkdir -p results
stamp="$(mktemp)"
deploy_rc=0
onecat deploy -i inventory/simulated.yml -e onecat_driver_batch=100% || deploy_rc=$?
rollout="$(find results -mindepth 2 -maxdepth 2 -name rollout.json -newer "${stamp}" | sort | tail -n 1)"
rm -f "${stamp}"
if [ -z "${rollout}" ]; then
  echo "demo.sh: the deploy wrote no rollout.json (exit ${deploy_rc}); see its output above" >&2
  exit 1
fi
run_dir="$(dirname "${rollout}")"
serving="$(python3 -c 'import json,sys; print(sum(1 for h in json.load(open(sys.argv[1]))["hosts"] if h.get("serving")))' "${rollout}")"
if [ "${serving}" = "0" ]; then
  echo "demo.sh: no node serves after the deploy (exit ${deploy_rc}); each host's reason is in the summary above and in ${rollout}" >&2
  exit 1
fi

# The gateway: the inventory's group `gateway`, reached at its container's address.
gateway_host="$(ansible-inventory -i inventory/simulated.yml --list \
  | python3 -c 'import json,sys; print((json.load(sys.stdin).get("gateway", {}).get("hosts") or [""])[0])')"
address="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${gateway_host}")"
gateway="http://${address}:8000"
# Closed by default: the gateway stage generated one client key on the controller (the
# simulated fleet keeps it in .cache/simulated/secrets); every client sends it.
keys_file=".cache/simulated/secrets/gateway-client-keys"
key_file="${run_dir}/client-key"
(umask 077 && awk 'NR == 1 {print $2}' "${keys_file}" > "${key_file}")
auth="Authorization: Bearer $(cat "${key_file}")"
model="$(curl -fsS -H "${auth}" "${gateway}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"

say "one completion through the gateway (${gateway})"
echo "The simulated nodes have no GPU: each runs a stand-in for the vLLM engine"
echo "(tests/standin_engine) that speaks the same HTTP API at a V100-like pace but writes short"
echo "common words picked from a hash of the prompt, not a model's answer."
echo "Without the client key the gateway answers $(curl -s -o /dev/null -w '%{http_code}' "${gateway}/v1/models"); with it (from ${keys_file}):"
curl -fsS "${gateway}/v1/completions" -H 'Content-Type: application/json' -H "${auth}" \
  -d "{\"model\": \"${model}\", \"prompt\": \"The capital of France is\", \"max_tokens\": 12, \"temperature\": 0}" \
  > "${run_dir}/completion.json"
python3 -m json.tool "${run_dir}/completion.json"

say "a short benchmark through the gateway"
onecat bench --url "${gateway}" --api-key-file "${key_file}" --out "${run_dir}/gateway" \
  --concurrency 1,4 --input-len 64 --output-len 32 --requests-per-level 8 --warmup 1 \
  --gateway-stats "http://${address}:8404/stats"
rm -f "${key_file}"

say "onecat status -i inventory/simulated.yml (what each node's watch says now)"
onecat status -i inventory/simulated.yml || true

# The monitoring stage's Prometheus and Alertmanager on the gateway host (roles/monitoring;
# the simulated fleet has them listen on every address of the container).
prometheus="http://${address}:9090"
say "what Prometheus on ${gateway_host} has firing (${prometheus}/alerts; Alertmanager on :9093)"
python3 - "${prometheus}" <<'PY' || echo "Prometheus did not answer at ${prometheus}"
import json
import sys
import urllib.request

with urllib.request.urlopen(f"{sys.argv[1]}/api/v1/alerts", timeout=10) as answer:
    alerts = [a for a in json.load(answer)["data"]["alerts"] if a["state"] == "firing"]
for alert in sorted(alerts, key=lambda a: (a["labels"].get("severity", ""), a["labels"]["alertname"])):
    labels = alert["labels"]
    where = " ".join(f"{k}={labels[k]}" for k in ("node", "gateway", "gpu", "model_name") if k in labels)
    summary = alert["annotations"].get("summary", "")
    print(f"  {labels.get('severity', ''):8} {labels['alertname']} {where}: {summary}")
print(f"{len(alerts)} firing; the demo sets no receiver, so none reached a person (docs/monitoring.md)")
PY

say "the fleet report"
onecat report "${run_dir}" --no-plots
python3 scripts/demo_summary.py "${run_dir}" "${gateway}" "$(( $(date +%s) - started ))"
