"""The burn-in in the fleet report: one row per node and a plot of its GPUs under load."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..text import one_line

BURNIN_PNG = "burnin_temperature.png"
# The numbers of one GPU in one sample that the report reads.
GPU_NUMBERS = ("index", "temperature_c", "power_draw_w", "ecc_uncorrected")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _records(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _cell(value: Any) -> str:
    """A markdown table cell from node-written text: one printable line, no column breaks."""
    return one_line(value).replace("|", "/")


def _normalized(data: Any) -> dict[str, Any]:
    """burnin.json as the report reads it: every field of the shape it expects, or dropped.

    The file comes from the node (untrusted on the controller): a wrong shape skips a field,
    never raises."""
    if not isinstance(data, dict) or "verdict" not in data or not isinstance(
            data.get("series"), list):
        raise ValueError("no verdict or series")
    series = []
    for sample in _records(data["series"]):
        t = _number(sample.get("t"))
        gpus = [{key: _number(gpu.get(key)) for key in GPU_NUMBERS}
                for gpu in _records(sample.get("gpus"))]
        series.append({"t": t, "gpus": gpus})
    load = data.get("load") if isinstance(data.get("load"), dict) else {}
    answers = data.get("answers") if isinstance(data.get("answers"), dict) else {}
    return {
        **data,
        "verdict": _cell(data["verdict"]),
        "series": series,
        "load": {**load, **{key: _number(load.get(key)) for key in
                            ("completed", "failed", "output_tokens_per_s")}},
        "answers": {**answers, "under_load": _records(answers.get("under_load"))},
        "findings": [{**f, "message": _cell(f.get("message", ""))}
                     for f in _records(data.get("findings"))],
        "seconds": _number(data.get("seconds")),
    }


def load_burnins(run_dir: Path, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """burnin.json files (written by roles/burnin), by host folder."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(run_dir.glob("*/burnin.json")):
        try:
            data = _normalized(json.loads(path.read_text()))
        except (OSError, ValueError, RecursionError) as exc:
            warnings.append(f"skipped {path}: {exc}")
            continue
        found[path.parent.name] = data
    return found


def _peak(data: dict[str, Any], key: str) -> float | None:
    values = [gpu[key] for row in data["series"] for gpu in row["gpus"] if gpu[key] is not None]
    return max(values) if values else None


def _ecc_rise(data: dict[str, Any]) -> int:
    if not data["series"]:
        return 0
    first, last = data["series"][0], data["series"][-1]
    before = {g["index"]: g["ecc_uncorrected"] or 0 for g in first["gpus"]}
    return int(sum(max(0, (g["ecc_uncorrected"] or 0) - before.get(g["index"], 0))
                   for g in last["gpus"]))


def _fmt(value: float | None, missing: str = "-") -> str:
    return missing if value is None else str(value)


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
        load = data["load"]
        asked = data["answers"]["under_load"]
        # Each answer and likelihood under load judged on its own ("same": an older burnin.json
        # that compared answers with the idle ones).
        good = sum(1 for a in asked if a.get("ok", a.get("same")) is True)
        findings = "; ".join(f["message"] for f in data["findings"]) or "-"
        temp, watts = _peak(data, "temperature_c"), _peak(data, "power_draw_w")
        admitted = "yes" if data.get("admitted") is True else "no"
        lines.append(
            f"| {_cell(host)} | {data['verdict']} | {admitted} | {_fmt(data['seconds'])} | "
            f"{_fmt(load['completed'], '0')} ({_fmt(load['failed'], '0')}) | "
            f"{_fmt(load['output_tokens_per_s'])} | {temp if temp is not None else '-'} | "
            f"{watts if watts is not None else '-'} | {_ecc_rise(data)} | "
            f"{good}/{len(asked)} ok | {findings} |"
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
        indices = sorted({g["index"] for row in data["series"] for g in row["gpus"]}, key=str)
        for index in indices:
            points = [
                (row["t"], g["temperature_c"])
                for row in data["series"]
                for g in row["gpus"]
                if g["index"] == index and row["t"] is not None and g["temperature_c"] is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=f"{_cell(host)} GPU {_fmt(index)}")
    ax.set_xlabel("seconds under load")
    ax.set_ylabel("GPU temperature (°C)")
    ax.set_title("Burn-in")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / BURNIN_PNG)
    plt.close(fig)
    return BURNIN_PNG
