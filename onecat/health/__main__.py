"""`python3 -m onecat.health`: check this node's GPUs without Ansible (3 a.m. triage)."""

import sys

from onecat.health.cli import main_local

sys.exit(main_local())
