"""Serving: the engine's command line, its image reference and its gate.

flags.py builds and checks the `vllm serve` flags the systemd unit runs;
image_ref.py refuses engine images that cannot run on Volta; gate.py waits for
/health and /v1/models and judges a smoke completion.

Ships to nodes (stdlib only): flags.py, image_ref.py, gate.py — used by
library/vllm_serve_command.py and library/vllm_gate.py as
ansible.module_utils.onecat.serve.*.
"""
