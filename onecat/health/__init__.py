"""GPU health: read NVML, judge the readings, say what serving should do.

nvml.py gathers readings through an injected pynvml; judge.py is the pure
policy (thresholds, severities, the verdict); local.py combines them for one
machine; cli.py is `onecat health` (`--local` or `-i INVENTORY`);
__main__.py makes `python3 -m onecat.health` the 3 a.m. check on a node.

Ships to nodes (stdlib only, relative imports): nvml.py, judge.py — used by
library/gpu_health.py as ansible.module_utils.onecat.health.*. With the watch, the repair
runner and the burn-in (roles/*/vars/main.yml): xid.py and xid_events.py (the driver's Xid
lines and NVML's Xid events) and gpu_lock.py (the reset lock the runner holds while no one
else may read NVML).
"""
