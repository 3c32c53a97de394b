"""playbooks/status.yml through real Ansible: a node that answers, one that does not, and the
newest rollout's reason for a node it held (what `onecat status` prints)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_status_names_unreachable_and_held_nodes(tmp_path: Path) -> None:
    state = tmp_path / "gateway-state"
    state.mkdir()
    (state / "node.json").write_text(json.dumps({"serving": True, "in_rotation": True}))
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"verdict": "healthy", "mode": "in", "findings": []}))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "ansible_become": False, "watch_verdict_file": str(verdict),
             "onecat_gateway_state_dir": str(state)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"v100": {"hosts": {
        "node-a": local,
        # Held at health by the last rollout: nothing of the watch or the serve stage on it.
        "node-c": {**local, "watch_verdict_file": str(tmp_path / "none.json"),
                   "onecat_gateway_state_dir": str(tmp_path / "none")},
        # Nothing listens on port 1: refused at once, as a node that is down.
        "node-b": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                   "ansible_host_key_checking": False, "ansible_ssh_timeout": 5},
    }}}}}))
    rollouts = tmp_path / "results"
    (rollouts / "20261204T1400-abc").mkdir(parents=True)
    (rollouts / "20261204T1400-abc" / "rollout.json").write_text(json.dumps({
        "run_id": "20261204T1400-abc", "hosts": [
            {"host": "node-a", "stage": "serve", "status": "ok", "reasons": []},
            {"host": "node-c", "stage": "health", "status": "held at health",
             "reasons": ["GPU 1 has 1 uncorrectable ECC error since the driver loaded"]}]}))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(REPO / "playbooks" / "status.yml"), "-e", f"onecat_results_dir={tmp_path}",
         "-e", f"onecat_status_rollouts_dir={rollouts}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    # node-b does not answer: the run says so (exit 4) and the table still comes.
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
    document = json.loads((tmp_path / "status.json").read_text())
    assert document["node-b"] == {"reached": False}
    table = subprocess.run(
        [sys.executable, "-m", "onecat.watch.status", str(tmp_path / "status.json"),
         "--results", str(rollouts)], cwd=REPO, capture_output=True, text=True, check=True,
        timeout=60).stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:] if line.startswith("node-")}
    assert rows["node-a"].split()[1:5] == ["healthy", "in", "yes", "in"], table
    assert rows["node-b"].split()[1] == "unreachable", table
    assert "held at health" in rows["node-c"] and "not installed (the rollout stopped" \
        in rows["node-c"] and "1 uncorrectable ECC error" in rows["node-c"], table
    assert "(held at a stage: as the newest rollout, 20261204T1400-abc, left them)" in table
