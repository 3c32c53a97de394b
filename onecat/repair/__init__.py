"""The repair ladder (issue 31): a node the watch drained for a fault a GPU reset or a reboot
can clear is repaired without an operator, one node (or a bounded few) of the fleet at a time.

remedies.py  which rung can clear which fault (the table, docs/repair.md)
history.py   the faults each card had and what was tried: a fault back within the recurrence
             window ends the ladder at "service required", with its report
lease.py     the fleet-wide bound (a lease book; lease_server.py on the gateway host,
             lease_client.py on the node)
run.py       the ladder on the node (`python3 -m onecat.repair`, onecat-repair.service):
             lease, stop the engine, reset its GPUs, judge, start, gate, burn in, readmit
cli.py       `onecat repair -i INVENTORY [--limit H] [--release]` (playbooks/repair.yml)

Stdlib and pynvml only. Ships to nodes: roles/watch copies the modules `python3 -m
onecat.repair` imports (its vars/main.yml lists them, with the watch's); roles/gateway copies
lease.py and lease_server.py to the gateway host.
"""
