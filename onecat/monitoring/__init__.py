"""The fleet's monitoring configuration as text: Prometheus's scrape jobs and rules, and
Alertmanager's routes, rendered from the inventory and each node's state.

Ships to nodes: nothing runs on a node; the monitoring_config module (library/) imports
plan.py, which imports the rest, and runs on the controller (stdlib only, relative imports,
as every module under library/ must).
"""
