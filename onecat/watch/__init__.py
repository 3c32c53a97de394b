"""The watch: what changed on a serving node's GPUs and answers since the last look (issue 14).

deltas.py compares two health readings (as onecat.health.nvml gathers them, one from the
watch's previous run, one now) and says what arrived in between: new uncorrectable ECC
errors, pending page retirements, hardware throttling, a GPU gone from the bus, new Xid
events. probe.py judges a quality probe's answer: empty, not text, collapsed into
repetition, or different from the reference answer recorded when the node passed its gate.
metrics.py writes both in Prometheus' text format for node_exporter's textfile collector.

Pure and stdlib only; the timer, its state and the gateway action come later.

Ships to nodes: nothing yet (the watch will run on each node from its systemd timer, as
`python3 -m onecat.watch`, not inside an Ansible module).
"""
