"""Asking a node questions and judging its answers: one home for the serve gate, the watch's
probe and the burn-in (issue 47; docs/answers.md), below all three.

ask.py asks one question (a completion, with what went wrong when nothing or garbage came back)
and judges a smoke completion; degenerate.py tells text from runaway loops and token soup;
prompts.py reads the fixed prompts (what a right answer contains, texts to score); likelihood.py
scores reference texts through the node's own logprobs; probe.py asks a prompt set and judges
every answer; hung.py tells a stuck engine from a slow one by its /metrics.

Stdlib only. Ships to nodes: ask.py and degenerate.py with the serve gate (as
ansible.module_utils), the whole package with the watch and the burn-in (their roles list
the files).
"""
