"""The fleet: running the playbooks and summing up what happened.

runner.py runs a playbook through ansible-runner with live per-host progress;
deploy.py is `onecat deploy` (and the run options `health -i`/`bench -i` share);
rollout.py sums up the stages per host (rollout.json and the table);
simulated.py is `onecat fleet up|down`, the local simulated fleet.

Ships to nodes (stdlib only): rollout.py — used by library/rollout_summary.py
as ansible.module_utils.onecat.fleet.rollout (it runs on the controller).
"""
