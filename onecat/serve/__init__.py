"""Serving: the engine's command line, its image reference and its gate.

flags.py builds and checks the `vllm serve` flags the systemd unit runs;
inputs.py checks every value that reaches the unit, the environment file or a
command line, and where the API is published; image_ref.py refuses engine
images that cannot run on Volta; gate.py waits for /health and /v1/models and
judges a smoke completion.

Ships to nodes (stdlib only): flags.py, inputs.py, image_ref.py, gate.py — used
by library/vllm_serve_command.py and library/vllm_gate.py as
ansible.module_utils.onecat.serve.*; gate.py brings ../answers/ask.py and
../answers/degenerate.py along (the smoke completion and the degeneracy detector the
watch and the burn-in judge by too) and ../httpsync.py (its HTTP client). guard.py
runs inside the engine container (vLLM's --middleware;
roles/vllm_serve/files/onecat_guard.py links to it) and closes every path of the
server behind its keys.
"""
