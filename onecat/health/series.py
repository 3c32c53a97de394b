"""Prometheus text-format pieces shared by the watch's and the health check's metrics files.

GPU series are labelled as NVIDIA's dcgm-exporter labels them (render_metrics.go): ``gpu``
(the index), ``UUID``, ``pci_bus_id`` and ``modelName``. Label values are escaped as the text
format says (backslash, newline, double quote), so no reading can add a line or a label.
"""

from __future__ import annotations

from typing import Any


def labels(**values: str) -> str:
    """``{name="value",...}`` with the text format's escapes."""
    parts = []
    for name, value in values.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{name}="{escaped}"')
    return "{" + ",".join(parts) + "}"


def gpu_labels(gpu: dict[str, Any]) -> dict[str, str]:
    """dcgm-exporter's GPU labels: gpu (index), UUID, pci_bus_id, modelName."""
    return {"gpu": str(gpu.get("index", "")), "UUID": str(gpu.get("uuid") or ""),
            "pci_bus_id": str(gpu.get("pci_bus_id") or ""),
            "modelName": str(gpu.get("name") or "")}


def metric_header(lines: list[str], name: str, kind: str, text: str) -> None:
    """A metric family's HELP and TYPE lines."""
    lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
