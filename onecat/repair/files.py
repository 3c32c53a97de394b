"""The repair ladder's files in its state folder (/var/lib/onecat/repair: survives a reboot):
the watch writes the order, the runner the progress, both the history and the report."""

ORDER_FILE = "order.json"
PROGRESS_FILE = "progress.json"
HISTORY_FILE = "history.json"
REPORT_FILE = "service-required.json"
