"""The engine's pins: `onecat engine lock` makes and checks the 1Cat-vLLM lock file.

One file per engine release (inventory/engine/1cat-vllm-<version>.lock.json) holds the
wheel's URL and SHA256, the base image's digests and the hash-locked requirements; the
serve stage builds from it. Each module has one job: wheel.py (fetch, verify, read
METADATA), indexes.py (which index each package may come from; uv's environment),
resolve.py (uv), simple.py (an index's simple API), verify.py (`--check`: every locked file
still served), registry.py (registry HTTP API v2), lockfile.py (the file), lock.py (create,
reuse, check), defaults.py (the serve role's values), cli.py (the command line); the serve
role runs the same command on the controller.

Ships to nodes: nothing (controller only).
"""
