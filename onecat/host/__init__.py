"""What a node already holds: its apt sources, and the stamps of the stages that passed there.

apt.py reads the host's apt sources (one-line .list and deb822 .sources) and computes
OpenPGP key fingerprints, so a role can reuse a repository the host already lists and
check that its key is the expected one.

stamp.py fingerprints what a stage manages on the node (files, dpkg state, units) and
compares it, with what the controller wants, against the stamp the stage left when it last
passed, so a re-run can skip a stage with nothing to do.

Ships to nodes (stdlib only, relative imports): apt.py — used by
library/apt_sources_info.py as ansible.module_utils.onecat.host.apt; stamp.py — used by
library/stage_stamp.py.
"""
