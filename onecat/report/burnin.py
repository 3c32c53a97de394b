"""The burn-in in the fleet report: one row per node and a plot of its GPUs under load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BURNIN_PNG = "burnin_temperature.png"


def load_burnins(run_dir: Path, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """burnin.json files (written by roles/burnin), by host folder."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(run_dir.glob("*/burnin.json")):
        try:
            data = json.loads(path.read_text())
            if not isinstance(data.get("series"), list) or "verdict" not in data:
                raise ValueError("no verdict or series")
        except (OSError, ValueError, AttributeError) as exc:
            warnings.append(f"skipped {path}: {exc}")
            continue
        found[path.parent.name] = data
    return found


def _peak(data: dict[str, Any], key: str) -> float | None:
    values = [
        gpu.get(key)
        for row in data["series"]
        for gpu in row.get("gpus") or []
        if isinstance(gpu.get(key), (int, float))
    ]
    return max(values) if values else None


def _ecc_rise(data: dict[str, Any]) -> int:
    first, last = data["series"][0], data["series"][-1]
    before = {g.get("index"): g.get("ecc_uncorrected") or 0 for g in first.get("gpus") or []}
    return sum(
        max(0, (g.get("ecc_uncorrected") or 0) - before.get(g.get("index"), 0))
        for g in last.get("gpus") or []
    )


def burnin_markdown(burnins: dict[str, dict[str, Any]], plot: str | None) -> str:
    lines = [
        "## Burn-in",
        "",
        "Each node under sustained load before admission (roles/burnin): NVML sampled "
        "every second, the fixed prompts asked again and again.",
        "",
        "| node | verdict | admitted | seconds | requests (failed) | output tok/s | "
        "max °C | max W | new uncorrectable ECC | answers under load | findings |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for host, data in sorted(burnins.items()):
        load = data.get("load") or {}
        asked = (data.get("answers") or {}).get("under_load") or []
        same = sum(1 for a in asked if a.get("same"))
        findings = "; ".join(f.get("message", "") for f in data.get("findings") or []) or "-"
        temp, watts = _peak(data, "temperature_c"), _peak(data, "power_draw_w")
        lines.append(
            f"| {host} | {data['verdict']} | {'yes' if data.get('admitted') else 'no'} | "
            f"{data.get('seconds', '-')} | {load.get('completed', 0)} ({load.get('failed', 0)}) | "
            f"{load.get('output_tokens_per_s') or '-'} | {temp if temp is not None else '-'} | "
            f"{watts if watts is not None else '-'} | {_ecc_rise(data)} | "
            f"{same}/{len(asked)} same | {findings} |"
        )
    if plot:
        lines += ["", f"![GPU temperature during the burn-in]({plot})"]
    return "\n".join(lines)


def write_burnin_plot(burnins: dict[str, dict[str, Any]], out: Path) -> str:
    """Temperature of every GPU over the burn-in, one line per node and GPU (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for host, data in sorted(burnins.items()):
        indices = sorted(
            {g.get("index") for row in data["series"] for g in row.get("gpus") or []}, key=str
        )
        for index in indices:
            points = [
                (row["t"], g["temperature_c"])
                for row in data["series"]
                for g in row.get("gpus") or []
                if g.get("index") == index and isinstance(g.get("temperature_c"), int)
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=f"{host} GPU {index}")
    ax.set_xlabel("seconds under load")
    ax.set_ylabel("GPU temperature (°C)")
    ax.set_title("Burn-in")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / BURNIN_PNG)
    plt.close(fig)
    return BURNIN_PNG
