"""The gateway: one HAProxy endpoint in front of the nodes that passed their serve gate.

backends.py picks the back-end servers from each node's serving state (never from the
inventory alone) and sizes their maxconn from the engine's --max-num-seqs; keys.py parses
and validates the client key file and renders what HAProxy reads (key hashes, never keys);
runtime.py speaks HAProxy's runtime API over its admin socket (drain, maint, ready, wait for
zero sessions, `show stat`); share.py turns two stats snapshots into each node's share of
the requests (for `onecat bench --gateway-stats` and `onecat report`).

Ships to nodes (stdlib only): backends.py, keys.py, runtime.py — used by
library/gateway_config.py and library/gateway_server.py as ansible.module_utils.onecat.gateway.*.
"""
