"""The watch: what changed on a serving node's GPUs and answers since the last look (issue 14).

deltas.py compares two health readings (as onecat.health.nvml gathers them, one from the
watch's previous run, one now) and says what arrived in between: new uncorrectable ECC
errors, pending page retirements, hardware throttling, a GPU gone from the bus, new Xid
events. probe.py judges a quality probe's answer: empty, not text, collapsed into
repetition, or different from the reference answer recorded when the node passed its gate.
metrics.py writes both in Prometheus' text format for node_exporter's textfile collector.
act.py decides what the node does about a look (drain, restart the engine once, hold out);
look.py runs one look and records it; status.py renders `onecat status`'s table.

Stdlib and pynvml only. Ships to nodes: roles/watch copies the modules `python3 -m
onecat.watch` imports (its vars/main.yml lists them) and runs them from a systemd timer.
"""
