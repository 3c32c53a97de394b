"""Preflight: is this host fit to become a V100 inference node, before any change?

pci.py finds NVIDIA GPUs on the PCI bus from sysfs (no driver needed);
checks.py gathers the OS, Secure Boot, nouveau, kernel headers and free disk
and judges them.

Ships to nodes (stdlib only, relative imports): pci.py, checks.py — used by
library/preflight_facts.py as ansible.module_utils.onecat.preflight.*.
"""
