"""A CPU-only stand-in for the vLLM OpenAI-compatible server (test double at the GPU edge).

It accepts `vllm serve MODEL [flags]` like the real engine, rejects what the real
engine rejects, and serves the same HTTP API with a documented, configurable
timing shape. See README.md next to pyproject.toml for every knob.
"""

__version__ = "0.1.0"
