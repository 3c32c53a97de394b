"""onecat: turn 2xV100 servers into pinned, health-checked vLLM servers for NVFP4 models.

Pure logic (judging health, planning memory, computing statistics) lives in
plain modules of this package; Ansible roles and modules under the repository
root only gather data and call into it. httpsync.py is the one blocking HTTP
client (stdlib only: it ships to nodes with the gate, the watch and the burn-in).
"""

__version__ = "0.1.0"
