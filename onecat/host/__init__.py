"""Host setup for the driver and runtime stages: what apt already knows on a node.

apt.py reads the host's apt sources (one-line .list and deb822 .sources) and computes
OpenPGP key fingerprints, so a role can reuse a repository the host already lists and
check that its key is the expected one.

Ships to nodes (stdlib only, relative imports): apt.py — used by
library/apt_sources_info.py as ansible.module_utils.onecat.host.apt.
"""
