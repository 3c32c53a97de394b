"""The seed article's reference benchmark (section 4.1), encoded as data.

Source: ../shared/seed/000_00d9c681ce4a3284.txt, section 4.1 ("并发压测的一组参考数据").
Setup: 2x V100 16GB, no NVLink, PCIe 3.0; Qwen2.5-14B-Instruct QUASAR-NVFP4;
N threads sending concurrently through the OpenAI API; ~500 prompt tokens,
256 output tokens. The columns are "总吞吐 (tokens/s)" (total throughput; the
article does not say whether prompt tokens count, so the report shows it next
to both output and total tok/s), "首Token延迟 (s)" (TTFT) and "每卡显存占用"
(memory per card, "约 10.5GB" = about 10.5 GB; unit as written).
"""

from __future__ import annotations

SEED_SOURCE = "seed article, section 4.1"
SEED_SETUP = ("2x V100 16GB, no NVLink, PCIe 3.0; Qwen2.5-14B-Instruct QUASAR-NVFP4; "
              "~500 prompt tokens, 256 output tokens")

# concurrency -> (throughput tok/s low, high), (TTFT s low, high), memory per card GB.
SEED_LEVELS: dict[int, dict[str, tuple[float, float] | float]] = {
    1: {"throughput_tok_s": (30, 40), "ttft_s": (0.3, 0.5), "memory_per_card_gb": 10.5},
    8: {"throughput_tok_s": (140, 180), "ttft_s": (1.2, 2.0), "memory_per_card_gb": 11.8},
    16: {"throughput_tok_s": (190, 220), "ttft_s": (2.5, 4.0), "memory_per_card_gb": 12.5},
    32: {"throughput_tok_s": (210, 240), "ttft_s": (5.0, 7.0), "memory_per_card_gb": 13.2},
}


def as_json() -> dict:
    return {
        "source": SEED_SOURCE,
        "setup": SEED_SETUP,
        "levels": {
            str(c): {k: list(v) if isinstance(v, tuple) else v for k, v in row.items()}
            for c, row in SEED_LEVELS.items()
        },
    }
