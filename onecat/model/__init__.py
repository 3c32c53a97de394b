"""The model: where a checkpoint comes from, what it really is and whether it fits.

safetensors.py reads shard headers (never tensor data); checkpoint.py detects
the quantization format and the architecture; engines.py holds what each engine
version can load on which GPU; plan.py plans memory per GPU and the serve flags, with
mtp.py (speculative decoding the server will run), hybrid_limits.py (what the fork refuses
at startup for a hybrid) and overrides.py (the user's engine flags the server gets);
cli.py is `onecat plan` (a directory, or hf:ORG/NAME@REV read over HTTP).
source.py parses model sources (hf:, file:, node:) and picks the files the engine
loads; manifest.py writes and checks onecat-manifest.json (files, sizes, sha256,
source, commit); fetch.py fetches once through huggingface_hub (controller only) and
plans a Hub model from its headers; model_cli.py is `onecat model fetch|verify`.

Ships to nodes (stdlib only, relative imports): safetensors.py, checkpoint.py,
engines.py, plan.py, mtp.py, hybrid_limits.py, overrides.py (with ../serve/flags.py) — used
by library/model_plan.py — and manifest.py, used by
library/model_verify.py, as ansible.module_utils.onecat.model.*.
"""
