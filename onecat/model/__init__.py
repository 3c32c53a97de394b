"""The model: what a checkpoint really is and whether it fits.

safetensors.py reads shard headers (never tensor data); checkpoint.py detects
the quantization format and the architecture; engines.py holds what each engine
version can load on which GPU; plan.py plans memory per GPU and the serve flags;
cli.py is `onecat plan`.

Ships to nodes (stdlib only, relative imports): safetensors.py, checkpoint.py,
engines.py, plan.py — used by library/model_plan.py as
ansible.module_utils.onecat.model.*.
"""
