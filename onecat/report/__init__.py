"""The fleet benchmark report: `onecat report results/<run-id>`.

cli.py is the command; load.py reads a run's results, analysis.py finds outliers,
render.py writes markdown/JSON, plots.py the PNG plots, reference.py holds the
seed article's reference table.

Ships to nodes: nothing (controller only).
"""
