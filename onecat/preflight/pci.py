"""Find NVIDIA GPUs on the PCI bus through sysfs, before any driver is installed.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.preflight.pci``.
The sysfs root is a parameter so a node can be pointed at another tree.
"""

from __future__ import annotations

import os

NVIDIA_VENDOR_ID = 0x10DE
# PCI base class 0x03 is "display controller": 0x0300 VGA, 0x0302 3D (headless compute GPUs).
DISPLAY_BASE_CLASS = 0x03

# Volta GV100 device IDs (from the PCI ID database) and their marketing names.
VOLTA_DEVICES: dict[int, str] = {
    0x1D81: "TITAN V",
    0x1DB1: "Tesla V100-SXM2-16GB",
    0x1DB3: "Tesla V100-FHHL-16GB",
    0x1DB4: "Tesla V100-PCIE-16GB",
    0x1DB5: "Tesla V100-SXM2-32GB",
    0x1DB6: "Tesla V100-PCIE-32GB",
    0x1DB7: "Tesla V100-DGXS-32GB",
    0x1DB8: "Tesla V100-SXM3-32GB",
    0x1DBA: "Quadro GV100",
    0x1DF0: "Tesla PG500-216",
    0x1DF2: "Tesla PG503-216",
    0x1DF5: "Tesla V100-SXM2-16GB",
    0x1DF6: "Tesla V100S-PCIE-32GB",
}

# Device-ID ranges of other data-centre architectures, enough to name what a host has.
_ARCH_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x1D80, 0x1DFF, "volta"),
    (0x1E00, 0x1FFF, "turing"),
    (0x2080, 0x20FF, "ampere"),
    (0x2200, 0x25FF, "ampere"),
    (0x2300, 0x233F, "hopper"),
    (0x2680, 0x28FF, "ada"),
    (0x2900, 0x2BFF, "blackwell"),
)


def gpu_architecture(device_id: int) -> str:
    """Name the architecture of an NVIDIA device ID, or "unknown"."""
    if device_id in VOLTA_DEVICES:
        return "volta"
    # Hopper sits inside an Ampere range, so the narrower range must win.
    if 0x2300 <= device_id <= 0x233F:
        return "hopper"
    for low, high, name in _ARCH_RANGES:
        if low <= device_id <= high:
            return name
    return "unknown"


def _read_hex(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip(), 16)
    except (OSError, ValueError):
        return None


def scan_nvidia_gpus(sysfs_root: str = "/sys") -> list[dict[str, object]]:
    """Return the NVIDIA display/3D-class functions under ``<sysfs_root>/bus/pci/devices``.

    Audio and USB functions of the same card (other classes) are not GPUs and are skipped.
    """
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        entries = sorted(os.listdir(devices_dir))
    except OSError:
        return []
    gpus: list[dict[str, object]] = []
    for bus_id in entries:
        base = os.path.join(devices_dir, bus_id)
        vendor = _read_hex(os.path.join(base, "vendor"))
        pci_class = _read_hex(os.path.join(base, "class"))
        device = _read_hex(os.path.join(base, "device"))
        if vendor != NVIDIA_VENDOR_ID or pci_class is None or device is None:
            continue
        if pci_class >> 16 != DISPLAY_BASE_CLASS:
            continue
        gpus.append(
            {
                "pci_bus_id": bus_id,
                "device_id": f"0x{device:04x}",
                "class": f"0x{pci_class:06x}",
                "name": VOLTA_DEVICES.get(device, f"NVIDIA device 0x{device:04x}"),
                "architecture": gpu_architecture(device),
            }
        )
    return gpus
