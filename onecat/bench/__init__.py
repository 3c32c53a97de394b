"""Benchmarking one vLLM server the way `vllm bench serve` does.

cli.py is the `onecat bench` command (and `python -m onecat.bench`, which the
benchmark role runs on a node from a copy of this package); session.py runs the
concurrency sweep; runner.py/sse.py/httpclient.py stream requests (aiohttp, as
vllm bench serve); stats.py and metrics.py compute the figures; prompts.py,
observe.py and output.py feed them.

Ships to nodes through Ansible modules: nothing (the benchmark role copies the
whole onecat package to a venv on the node, with aiohttp, instead).
"""
