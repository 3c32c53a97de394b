"""Wall time of a full rollout, of idempotent re-runs, and of a re-run that repairs one node.

Uses the `fleet` molecule scenario (Debian 12 systemd nodes in Docker, see README):
for each fleet size it recreates the nodes, runs site.yml against the first N of
them (fleet-c, the third, is held out by the health stage, as on a real fleet
with one bad card), then runs it twice more with nothing changed (a stage whose stamp
matches is skipped, roles/stage_stamp; a stage whose last run waited for something, such
as the runtime stage's GPU container check for the engine image the serve stage brings
later, runs in full once more), then edits fleet-a's vllm.service by hand
(drift) and runs it once more: fleet-a must be repaired (changed > 0) and the others
stay at changed=0. Prints one line per size (molecule converge's wall time, its own start
included), the stages each run ran per node, and each re-run's playbook time alone.
Needs what scripts/bootstrap.sh installs; takes 15-30 minutes on 2 cores.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/rollout_time.py [--sizes 1,3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = ["fleet-a", "fleet-b", "fleet-c"]
UNIT = "/etc/systemd/system/vllm.service"


def molecule(*args: str) -> tuple[int, float, str]:
    bindir = Path(sys.executable).parent
    # The timer callback prints the playbook's own wall time (molecule's start excluded).
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "NO_COLOR": "1",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.timer",
    }
    started = time.monotonic()
    proc = subprocess.run(
        [str(bindir / "molecule"), *args],
        cwd=REPO,
        env=env,
        check=False,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc.returncode, time.monotonic() - started, proc.stdout


def playbook_s(output: str) -> float | None:
    """The playbook's own wall time, from the timer callback's last line."""
    found = re.findall(
        r"Playbook run took (\d+) days, (\d+) hours, (\d+) minutes, (\d+) seconds", output
    )
    if not found:
        return None
    days, hours, minutes, seconds = (int(part) for part in found[-1])
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def changed(output: str) -> dict[str, int]:
    """changed= per host from the last PLAY RECAP of a run."""
    recap = output[output.rfind("PLAY RECAP") :]
    rows = re.findall(r"(?m)^(\S+)\s+: ok=\d+\s+changed=(\d+)", recap)
    return {host: int(count) for host, count in rows if host != "localhost"}


def stages_run(output: str) -> dict[str, list[str]]:
    """Per node, the stamped stages that ran (the others were skipped: their stamp matched)."""
    text = " ".join(output.split())
    ran: dict[str, list[str]] = {}
    # molecule's ansible.cfg prints results as JSON ("msg": "..."), ours as YAML ('...').
    for host, stage in re.findall(r"[\"'](\S+): the (\w+) stage runs: ", text):
        ran.setdefault(host, []).append(stage)
    for host in re.findall(r"[\"'](\S+): the \w+ stage is skipped: ", text):
        ran.setdefault(host, [])
    return ran


def measure(size: int) -> dict[str, object]:
    limit = ",".join(NODES[:size])
    molecule("destroy", "-s", "fleet")
    rc, _, _ = molecule("create", "-s", "fleet")  # create + prepare
    if rc:
        raise SystemExit(f"rollout_time: creating the fleet failed (rc {rc}); run it by hand")
    first_rc, first, _ = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    again_rc, again, again_out = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    settled_rc, settled, settled_out = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    # Drift: an operator edits fleet-a's unit by hand; the re-run must put it back.
    subprocess.run(
        ["docker", "exec", "fleet-a", "sed", "-i", "$a # edited by hand", UNIT], check=True
    )
    drift_rc, drift, drift_out = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    molecule("destroy", "-s", "fleet")
    return {
        "size": size,
        "first_s": first,
        "first_rc": first_rc,
        "again_s": again,
        "again_rc": again_rc,
        "again_changed": changed(again_out),
        "settled_s": settled,
        "settled_rc": settled_rc,
        "settled_changed": changed(settled_out),
        "drift_s": drift,
        "drift_rc": drift_rc,
        "drift_changed": changed(drift_out),
        "ran": [stages_run(again_out), stages_run(settled_out), stages_run(drift_out)],
        "playbook_s": [playbook_s(out) for out in (again_out, settled_out, drift_out)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,3", help="fleet sizes to measure (default 1,3)")
    sizes = [int(part) for part in parser.parse_args().sizes.split(",")]
    print(
        f"{'nodes':>5} {'rollout s':>10} {'rc':>3} {'re-run 1 s':>11} {'rc':>3} "
        f"{'re-run 2 s':>11} {'rc':>3} {'drift re-run s':>15} {'rc':>3}  "
        "changed per node (re-run 1 / re-run 2 / drift re-run)"
    )
    rows = []
    for size in sizes:
        row = measure(size)
        rows.append(row)
        print(
            f"{row['size']:>5} {row['first_s']:>10.0f} {row['first_rc']:>3} "
            f"{row['again_s']:>11.0f} {row['again_rc']:>3} {row['settled_s']:>11.0f} "
            f"{row['settled_rc']:>3} {row['drift_s']:>15.0f} {row['drift_rc']:>3}  "
            f"{row['again_changed']} / {row['settled_changed']} / {row['drift_changed']}",
            flush=True,
        )
    for row in rows:
        for label, ran in zip(("re-run 1", "re-run 2", "drift re-run"), row["ran"], strict=True):
            listed = ", ".join(
                f"{host} {'+'.join(stages) or 'none'}" for host, stages in sorted(ran.items())
            )
            print(
                f"{row['size']} node(s), {label}: stamped stages run: {listed or 'no stamp checks'}"
            )
    for row in rows:
        own = ", ".join("?" if took is None else f"{took:.0f} s" for took in row["playbook_s"])
        print(
            f"{row['size']} node(s), the playbook alone (timer callback; re-run 1, re-run 2, "
            f"drift re-run): {own}"
        )
    print("rc 2 with 3 nodes is expected: fleet-c is held out by the health stage.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
