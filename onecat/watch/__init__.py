"""The watch: what changed on a serving node's GPUs and answers since the last look (issue 14).

deltas.py judges a look's readings (as onecat.health.nvml gathers them) with the health stage's
own rules (onecat.health.judge: conditions that last, such as a lost GPU, a pending retirement,
uncorrectable errors since the driver loaded) and says what arrived since the previous look
(new retired pages, corrected-error bursts, a GPU gone, new Xid events; the boot id keeps a
reboot's counters apart); throttle.py fails hardware slowdown only when it is sustained (gpud's
rule), from a history of looks. The quality probe's questions and their judging live in
onecat/answers (shared with the serve gate and the burn-in). metrics.py writes both in
Prometheus' text format for node_exporter's textfile collector. act.py decides what the node
does about a look (drain, restart the engine once, hold out); look.py runs one look and
records it; status.py renders `onecat status`'s table.

Stdlib and pynvml only. Ships to nodes: roles/watch copies the modules `python3 -m
onecat.watch` imports (its vars/main.yml lists them) and runs them from a systemd timer.
"""
