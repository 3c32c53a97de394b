"""The repair ladder's files in its state folder (/var/lib/onecat/repair: survives a reboot):
the watch writes the order, the runner the progress, both the history and the report."""

ORDER_FILE = "order.json"
PROGRESS_FILE = "progress.json"
HISTORY_FILE = "history.json"
REPORT_FILE = "service-required.json"
# In the gateway agent's folder, beside the watch's answer (watch-state): the runner's drain,
# written once its lease is granted. An operator's order keeps the node in rotation until then
# (issue 46: `onecat repair` on every node takes them out one lease at a time, not all at once);
# the agent answers it only while the watch's own answer is `up`, and the watch removes it
# when the node leaves `repairing` (roles/gateway's agent unit).
REPAIR_DRAIN_FILE = "repair-drain"
