"""Benchmarking one vLLM server the way `vllm bench serve` does (see command.py for the CLI)."""

from onecat.bench.command import register

__all__ = ["register"]
