"""What the controller wants for each stage with a stamp renders for its role as it is in the
repository: a role file the stamp cannot read (a link to a folder, say) stops every run of that
stage on the first host, before anything is recorded (the molecule scenarios find it only after
a whole converge)."""

from __future__ import annotations

import pytest

from .ansible_run import host_outcome, run_playbook

# Each stage and the role its stamp names (playbooks/*.yml, stage_stamp_role).
STAGES = {"driver": "nvidia_driver", "runtime": "container_runtime", "serve": "vllm_serve",
          "watch": "watch"}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_what_a_stage_wants_renders_for_its_role(tmp_path, stage):
    hosts = {"h": {"stage_stamp_stage": stage, "stage_stamp_role": STAGES[stage]}}
    data = run_playbook("stamp_want.yml", hosts, tmp_path, check=False)
    outcome = host_outcome(data, "h")
    assert outcome["failed_task"] is None, outcome
