"""PNG plots of throughput and TTFT versus concurrency, one line per node (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from onecat.report import reference
from onecat.report.load import NodeResult

THROUGHPUT_PNG = "throughput_vs_concurrency.png"
TTFT_PNG = "ttft_vs_concurrency.png"


def _plot(nodes: list[NodeResult], key: str, scale: float, ylabel: str, title: str,
          seed_key: str, seed_scale: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on a controller or in CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    seed_levels = sorted(reference.SEED_LEVELS)
    low = [reference.SEED_LEVELS[c][seed_key][0] * seed_scale for c in seed_levels]
    high = [reference.SEED_LEVELS[c][seed_key][1] * seed_scale for c in seed_levels]
    ax.fill_between(seed_levels, low, high, color="0.85", label="seed 4.1 reference")
    for node in nodes:
        points = [(c, r[key] * scale) for c, r in sorted(node.levels.items())
                  if isinstance(r.get(key), (int, float))]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=node.host)
    ax.set_xscale("log", base=2)
    levels = sorted({c for n in nodes for c in n.levels} | set(seed_levels))
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(nodes: list[NodeResult], out: Path) -> list[str]:
    """Write both PNGs into `out`; returns their file names."""
    _plot(nodes, "output_throughput", 1.0, "output tokens/s", "Throughput vs concurrency",
          "throughput_tok_s", 1.0, out / THROUGHPUT_PNG)
    _plot(nodes, "median_ttft_ms", 1.0, "TTFT p50 (ms)", "Time to first token vs concurrency",
          "ttft_s", 1000.0, out / TTFT_PNG)
    return [THROUGHPUT_PNG, TTFT_PNG]
