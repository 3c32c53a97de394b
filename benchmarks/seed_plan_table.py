"""The seed's acceptance table and the worked example, derived from the planner's output.

Builds the five checkpoints of the seed's table (synthetic safetensors with the published
configs, tests/model_fixtures.py), plans each on two "16 GB" V100s as NVML reports them
(16160 MiB, PCIe pair: the facts the serve role passes), TP2, 8192 context, utilization 0.9,
and prints the tables that README.md and docs/plan.md carry between their
``<!-- seed-plan:NAME -->`` markers.

    .venv/bin/python benchmarks/seed_plan_table.py           # print the blocks
    .venv/bin/python benchmarks/seed_plan_table.py --write   # rewrite them in the docs
    .venv/bin/python benchmarks/seed_plan_table.py --check   # exit 1 when the docs differ

tests/unit/test_seed_plan_docs.py runs --check, so a hand-edited figure fails the tests.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import model_fixtures as mf  # noqa: E402

from onecat.model.plan import (  # noqa: E402
    ACTIVATION_HIDDEN_COPIES,
    ACTIVATION_INTERMEDIATE_COPIES,
    GIB,
    SAMPLER_BYTES_PER_LOGIT,
    plan_model,
)

V100_PAIR = {"gpu_health": {
    "pairs": [{"gpus": [0, 1], "topology": "PHB", "p2p_read": "CHIPSET_NOT_SUPPORTED",
               "p2p_write": "CHIPSET_NOT_SUPPORTED"}],
    "gpus": [{"index": 0, "memory_total_mib": 16160}, {"index": 1, "memory_total_mib": 16160}],
    "recommendations": {"nccl_p2p_disable": False, "disable_custom_all_reduce": True},
}}
SEED_MODELS = (
    ("Qwen2.5-7B NVFP4", mf.QWEN25_7B, "nvfp4-ct"),
    ("Qwen2.5-14B NVFP4", mf.QWEN25_14B, "nvfp4-ct"),
    ("Qwen2.5-32B NVFP4", mf.QWEN25_32B, "nvfp4-ct"),
    ("Qwen2.5-14B FP16", mf.QWEN25_14B, "fp16"),
    ("Llama-3.1-70B NVFP4", mf.LLAMA31_70B, "nvfp4-ct"),
)
# Hybrid (Gated DeltaNet) checkpoints: in docs/plan.md's table and worked example only.
HYBRID_MODELS = (
    ("Qwen3.8-27B NVFP4 (hybrid)", mf.QWEN38_27B, "nvfp4-ct"),
)
DOCS = {"readme": ROOT / "README.md", "plan": ROOT / "docs" / "plan.md",
        "example": ROOT / "docs" / "plan.md", "example-27b": ROOT / "docs" / "plan.md"}


def plans(root: Path, models: tuple = SEED_MODELS) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for index, (name, config, fmt) in enumerate(models):
        model = mf.build_model(root, config, fmt, name=f"{'h' if models is HYBRID_MODELS else 'm'}"
                               f"{index}")
        out.append((name, plan_model(str(model), health=V100_PAIR)))
    return out


MINUS = "\N{MINUS SIGN}"


def _g(value: float) -> str:
    return f"{value / GIB:.2f}"


def _verdict(plan: dict[str, Any]) -> str:
    if plan["fits"]:
        return "fits" if plan["max_concurrency_at_max_model_len"] >= 4 else "fits, with advice"
    if plan["nothing_fits"]:
        return "does not fit: not recommended on this hardware"
    return "does not fit at 8192"


def readme_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| checkpoint | weights per GPU (checkpoint → resident) | full-length sequences "
             "| verdict |", "|---|---|---|---|"]
    for name, plan in rows:
        lines.append(f"| {name} | {_g(plan['checkpoint_bytes_per_gpu'])} → "
                     f"{_g(plan['weight_bytes_per_gpu'])} GiB | "
                     f"{plan['max_concurrency_at_max_model_len']} | {_verdict(plan)} |")
    return "\n".join(lines)


def plan_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| model | checkpoint GiB/GPU | resident GiB/GPU (of which embed+lm_head) "
             "| activation peak GiB | KV KiB/token/GPU | KV budget GiB/GPU | KV tokens "
             "| full 8192 seqs | --max-num-seqs | fits |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, plan in rows:
        mem = plan["memory_per_gpu"]
        budget = mem["kv_budget_bytes"]
        lines.append(
            f"| {name} | {_g(plan['checkpoint_bytes_per_gpu'])} "
            f"| {_g(plan['weight_bytes_per_gpu'])} ({_g(mem['embeddings_bytes'])}) "
            f"| {_g(mem['activation_bytes'])} "
            f"| {plan['kv_cache_bytes_per_token_per_gpu'] // 1024} "
            f"| {MINUS if budget < 0 else ''}{abs(budget) / GIB:.2f} "
            f"| {plan['max_kv_tokens']:,} | {plan['max_concurrency_at_max_model_len']} "
            f"| {plan['serve_args']['--max-num-seqs']} | {'yes' if plan['fits'] else 'no'} |")
    return "\n".join(lines)


def worked_example(rows: list[tuple[str, dict[str, Any]]]) -> str:
    plan = dict(rows)["Qwen2.5-14B NVFP4"]
    mem, dims, inputs = plan["memory_per_gpu"], plan["dims"], plan["inputs"]
    tp, length, util = inputs["tensor_parallel_size"], inputs["max_model_len"], \
        inputs["gpu_memory_utilization"]
    batched, seqs = inputs["max_num_batched_tokens"], inputs["max_num_seqs"]
    hidden, inter, vocab = dims["hidden_size"], dims["intermediate_size"], dims["vocab_size"]
    kv_heads = max(1, dims["num_key_value_heads"] // tp)
    scales = plan["weight_bytes_per_gpu"] - plan["checkpoint_bytes_per_gpu"]
    kv_gpu = plan["kv_cache_bytes_per_token_per_gpu"]
    total_mib = mem["total_bytes"] // 2**20
    lines = [
        f"card         {total_mib} MiB from NVML (health facts) = {_g(mem['total_bytes'])} GiB",
        f"requested    ceil({_g(mem['total_bytes'])} GiB x {util}) = "
        f"{_g(mem['requested_bytes'])} GiB                  v1/worker/utils.py:440-442",
        f"weights      {_g(plan['checkpoint_bytes_per_gpu'])} GiB checkpoint per GPU + "
        f"{_g(scales)} GiB (FP8 block scales rebuilt as FP16) = "
        f"{_g(plan['weight_bytes_per_gpu'])} GiB resident",
        f"activation   max(forward {batched} tokens x 2 B x ({ACTIVATION_HIDDEN_COPIES} x {hidden}"
        f" + {ACTIVATION_INTERMEDIATE_COPIES} x {inter}/{tp}) = "
        f"{_g(mem['activation_forward_bytes'])} GiB,",
        f"                 sampler {seqs} seqs x {vocab} vocab x {SAMPLER_BYTES_PER_LOGIT} B = "
        f"{_g(mem['activation_sampler_bytes'])} GiB)",
        f"             + TurboMind GEMM workspace {mem['activation_workspace_bytes']:,} B = "
        f"{_g(mem['activation_bytes'])} GiB (estimated)",
        f"rotary       {dims['rope']['positions']} positions x {dims['rope']['rotary_dim']} x 2 B "
        f"= {mem['rotary_cache_bytes'] / 2**20:g} MiB cos_sin_cache    "
        "rotary_embedding/base.py:58-63",
        f"non-torch    {_g(mem['non_torch_bytes'])} GiB (workspaces created while profiling)",
        f"KV budget    {_g(mem['requested_bytes'])} - {_g(plan['weight_bytes_per_gpu'])} - "
        f"{_g(mem['rotary_cache_bytes'])} - {_g(mem['activation_bytes'])} - "
        f"{_g(mem['non_torch_bytes'])} = {_g(mem['kv_budget_bytes'])} GiB"
        "    v1/worker/gpu_worker.py:425-460",
        f"KV per token 2 x {dims['kv_layers']} layers x {kv_heads} kv heads x "
        f"{dims['head_dim']} x 2 B = {kv_gpu // 1024} KiB per GPU",
        f"tokens       {_g(mem['kv_budget_bytes'])} GiB / {kv_gpu // 1024} KiB, whole 16-token "
        f"blocks = {plan['max_kv_tokens']:,}",
        f"sequences    {plan['max_kv_tokens']:,} / {length} = "
        f"{plan['max_concurrency_at_max_model_len']}",
        f"headroom     {_g(mem['total_bytes'])} - {_g(mem['requested_bytes'])} = "
        f"{_g(mem['headroom_bytes'])} GiB >= {_g(mem['cuda_context_bytes'])} CUDA context + NCCL"
        f" + {_g(mem['cuda_graph_bytes'])} CUDA graphs = {_g(mem['outside_bytes'])} GiB",
        f"             (utilization at most {mem['max_utilization']:.2f})",
        f"max-seqs     {plan['max_num_seqs_reason']}",
    ]
    return "```\n" + "\n".join(lines) + "\n```"


def worked_example_27b(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """The hybrid worked example, term by term (citations: docs/plan.md, plan.py)."""
    plan = rows[0][1]
    mem, dims, hyb = plan["memory_per_gpu"], plan["dims"], plan["hybrid"]
    lin, tp = dims["linear"], plan["inputs"]["tensor_parallel_size"]
    length = plan["inputs"]["max_model_len"]
    kv_heads = max(1, dims["num_key_value_heads"] // tp)
    conv_dim = (2 * lin["linear_num_key_heads"] * lin["linear_key_head_dim"]
                + lin["linear_num_value_heads"] * lin["linear_value_head_dim"])
    lines = [
        f"layers       {dims['num_hidden_layers']} = {lin['full_attention_layers']} full "
        f"attention + {lin['linear_layers']} Gated DeltaNet (layer_types)",
        f"weights      {_g(plan['checkpoint_bytes_per_gpu'])} GiB checkpoint per GPU (mtp.* "
        f"skipped) -> {_g(plan['weight_bytes_per_gpu'])} GiB resident",
        f"rotary       {dims['rope']['positions']} positions x {dims['rope']['rotary_dim']} x 2 B "
        f"= {mem['rotary_cache_bytes'] / 2**20:g} MiB",
        f"activation   {_g(mem['activation_bytes'])} GiB (forward "
        f"{_g(mem['activation_forward_bytes'])}, sampler {plan['inputs']['max_num_seqs']} seqs "
        f"{_g(mem['activation_sampler_bytes'])}, + TurboMind workspace; estimated)",
        f"KV budget    {_g(mem['requested_bytes'])} - {_g(plan['weight_bytes_per_gpu'])} - "
        f"{_g(mem['rotary_cache_bytes'])} - {_g(mem['activation_bytes'])} - "
        f"{_g(mem['non_torch_bytes'])} = {_g(mem['kv_budget_bytes'])} GiB",
        f"KV per token 2 x {lin['full_attention_layers']} full layers x {kv_heads} kv heads x "
        f"{dims['head_dim']} x 2 B = {plan['kv_cache_bytes_per_token_per_gpu'] // 1024} KiB per "
        "GPU (attention layers only)",
        f"conv state   {conv_dim}/{tp} x ({lin['linear_conv_kernel_dim']} - 1) x 2 B = "
        f"{hyb['conv_state_bytes']:,} B per linear layer",
        f"recur. state {lin['linear_num_value_heads']}/{tp} x {lin['linear_value_head_dim']} x "
        f"{lin['linear_key_head_dim']} x {lin['ssm_state_bytes']} B ({lin['ssm_state_dtype']}) = "
        f"{hyb['ssm_state_bytes']:,} B per linear layer",
        f"state/seq    {lin['linear_layers']} x {hyb['state_bytes']:,} B = "
        f"{hyb['state_bytes_per_sequence'] / 2**20:.1f} MiB once; align mode holds "
        f"{hyb['linear_groups']} groups x 2 blocks x {hyb['group_size']} layers x "
        f"{hyb['page_bytes']:,} B = {hyb['state_bytes_held_per_sequence'] / 2**20:.1f} MiB "
        "per sequence per GPU",
        f"block size   16 x ceil({hyb['state_bytes']:,} / (16 x "
        f"{hyb['attention_bytes_per_token']:,})) = {hyb['block_size']} tokens; page "
        f"{hyb['page_bytes']:,} B",
        f"groups       {hyb['group_size']} layers each: {hyb['full_groups']} attention + "
        f"{hyb['linear_groups']} state",
        f"blocks       {_g(mem['kv_budget_bytes'])} GiB / {hyb['page_bytes']:,} B / "
        f"{hyb['group_size']} = {hyb['num_blocks']:,}",
        f"per request  ceil({length} / {hyb['block_size']}) + {hyb['linear_groups']} x 2 = "
        f"{hyb['blocks_per_request']} blocks (prefix caching, mamba_cache_mode align)",
        f"sequences    {hyb['num_blocks']:,} / {hyb['blocks_per_request']} = "
        f"{plan['max_concurrency_at_max_model_len']} of {length}; engine's KV tokens "
        f"{plan['max_kv_tokens']:,}",
        f"max-seqs     {plan['max_num_seqs_reason']}",
    ]
    return "```\n" + "\n".join(lines) + "\n```"


def blocks() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        rows = plans(Path(tmp))
        hybrid = plans(Path(tmp), HYBRID_MODELS)
    return {"readme": readme_table(rows), "plan": plan_table(rows + hybrid),
            "example": worked_example(rows), "example-27b": worked_example_27b(hybrid)}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- seed-plan:{name} -->\n)(.*?)(<!-- /seed-plan:{name} -->)",
                      re.DOTALL)


def apply(text: str, name: str, block: str) -> str:
    pattern = _pattern(name)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- seed-plan:{name} --> markers in the document")
    return pattern.sub(lambda m: m.group(1) + block + "\n" + m.group(3), text)


def stale(generated: dict[str, str]) -> list[str]:
    """Names of the blocks whose text in the docs differs from the planner's output."""
    out = []
    for name, block in generated.items():
        text = DOCS[name].read_text()
        if apply(text, name, block) != text:
            out.append(f"{DOCS[name].relative_to(ROOT)} ({name})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks in the docs")
    parser.add_argument("--check", action="store_true", help="exit 1 when the docs differ")
    args = parser.parse_args()
    generated = blocks()
    if args.write:
        for name, block in generated.items():
            path = DOCS[name]
            path.write_text(apply(path.read_text(), name, block))
        return 0
    if args.check:
        old = stale(generated)
        for item in old:
            print(f"stale: {item}: run benchmarks/seed_plan_table.py --write", file=sys.stderr)
        return 1 if old else 0
    for name, block in generated.items():
        print(f"<!-- seed-plan:{name} -->\n{block}\n<!-- /seed-plan:{name} -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
