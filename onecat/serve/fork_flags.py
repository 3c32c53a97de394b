"""Engine arguments only the 1Cat-vLLM fork takes: upstream vLLM's parser refuses them.

Stdlib only, like onecat/serve/flags.py (which ships to nodes), so the role's own check can use
it. The one list of them, each with the fork's file:line at FORK_COMMIT. The real-parser tier
(tests/real_engine/test_serve_flags_real_parser.py) parses every command the serve role can
compose with upstream vLLM's own parser, minus these, and fails when upstream takes one of
them: then the entry is stale and goes.

How they were found: the long options of the fork's vllm/engine/arg_utils.py and
vllm/entrypoints/openai/cli_args.py (their literal "--..." strings and FrontendArgs' fields)
compared with the options of upstream vllm 0.32.0's `vllm serve` parser. The four flags below
were upstream vLLM's once and the fork keeps them; 0.32.0 has none of them. The V100 attention
backends are the fork's own. onecat emits FLASH_ATTN_V100 (onecat/model/plan.py
_attention_backend) and none of the flags.
"""

from __future__ import annotations

FORK_REPO = "1CatAI/1Cat-vLLM"
FORK_COMMIT = "ae13773a0deebf583022613c4508e5072cedef91"

# Flag -> (a value of the form the fork takes, None for a bare flag; where the fork defines it).
FORK_ONLY_FLAGS: dict[str, tuple[str | None, str]] = {
    "--override-attention-dtype": ("float16", "vllm/engine/arg_utils.py:887"),
    "--calculate-kv-scales": (None, "vllm/engine/arg_utils.py:1174"),
    "--max-num-partial-prefills": ("1", "vllm/engine/arg_utils.py:1409"),
    "--max-long-partial-prefills": ("1", "vllm/engine/arg_utils.py:1412"),
}
# (flag, value) -> where the fork defines the value. Upstream's parser takes
# --attention-backend as a string; its AttentionConfig refuses a backend it does not have.
FORK_ONLY_VALUES: dict[tuple[str, str], str] = {
    # The planner's backend on sm_70 for head_dim 64/128/256 (onecat/model/plan.py
    # _attention_backend).
    ("--attention-backend", "FLASH_ATTN_V100"):
        "vllm/v1/attention/backends/registry.py:45 (AttentionBackendEnum.FLASH_ATTN_V100)",
    ("--attention-backend", "FLASHINFER_SM70"):
        "vllm/v1/attention/backends/registry.py:48 (AttentionBackendEnum.FLASHINFER_SM70)",
}


def fork_only_value(name: str, value: str) -> str | None:
    """Where the fork defines this flag's value, None when upstream has it too. vLLM reads a
    backend's name without case (upstream 0.32.0 vllm/config/attention.py:192,
    `AttentionBackendEnum[value.upper()]`)."""
    return FORK_ONLY_VALUES.get((name, value.strip().upper()))


def split_fork_only(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """argv without its fork-only flags and values, and what was taken out (each flag with its
    value, as given): upstream vLLM's parser checks the rest."""
    kept: list[str] = []
    taken: list[list[str]] = []
    index = 0
    while index < len(argv):
        item = argv[index]
        name, sep, value = item.partition("=")
        following = argv[index + 1] if index + 1 < len(argv) else None
        if name in FORK_ONLY_FLAGS:
            # A bare flag never takes the next item; one with a value takes it unless "=" did
            # or the next item is a flag of its own.
            width = (1 if sep or FORK_ONLY_FLAGS[name][0] is None or following is None
                     or following.startswith("--") else 2)
        elif fork_only_value(name, value if sep else following or "") is not None:
            width = 1 if sep else 2
        else:
            kept.append(item)
            index += 1
            continue
        taken.append(argv[index:index + width])
        index += width
    return kept, taken
