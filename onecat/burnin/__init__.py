"""Burn-in: a node earns its place under load before the gateway sends it users (issue 14).

load.py keeps the node's own server busy (the benchmark's streaming client, closed loop);
judge.py turns the NVML samples taken meanwhile and the answers to fixed prompts asked under
load into a verdict with its evidence; run.py ties them together for
`python3 -m onecat.burnin` (run on the node by roles/burnin).

Stdlib and pynvml only. Ships to nodes: roles/burnin copies the modules `python3 -m
onecat.burnin` imports (its vars/main.yml lists them; the benchmark's client among them).
"""
