"""Read a host's readiness facts and judge whether it can become a onecat node.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.preflight.checks``.
``gather`` reads the host (sysfs, /lib/modules, filesystems); ``judge`` is pure.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .pci import scan_nvidia_gpus

# The EFI variable that holds the Secure Boot state (GUID of the EFI global variable namespace).
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-e0f86ef8e6ba"

SUPPORTED_OS: dict[str, tuple[str, ...]] = {
    "Ubuntu": ("22.04", "24.04"),
    "Debian": ("12",),
}

GIB = 1024**3


def secure_boot_state(sysfs_root: str) -> bool | None:
    """True/False from the EFI variable; None on a BIOS boot or when it cannot be read."""
    path = os.path.join(sysfs_root, "firmware", "efi", "efivars", SECURE_BOOT_VAR)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # 4 bytes of attributes, then one byte of value.
    return len(data) >= 5 and data[4] == 1


def _existing_parent(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_free(path: str) -> dict[str, Any]:
    """Free space of the filesystem that will hold ``path`` (which may not exist yet)."""
    probe = _existing_parent(path)
    stats = os.statvfs(probe)
    return {
        "path": path,
        "measured_at": probe,
        "free_gib": round(stats.f_bavail * stats.f_frsize / GIB, 1),
        "total_gib": round(stats.f_blocks * stats.f_frsize / GIB, 1),
    }


def gather(
    sysfs_root: str = "/sys",
    modules_root: str = "/lib/modules",
    disk_paths: Iterable[str] = (),
    kernel_release: str | None = None,
) -> dict[str, Any]:
    """Collect what preflight judges. Read-only."""
    release = kernel_release or platform.release()
    return {
        "gpus": scan_nvidia_gpus(sysfs_root),
        "secure_boot": secure_boot_state(sysfs_root),
        "nouveau_loaded": os.path.isdir(os.path.join(sysfs_root, "module", "nouveau")),
        "kernel_release": release,
        "kernel_headers": os.path.isdir(os.path.join(modules_root, release, "build")),
        "disks": [disk_free(path) for path in disk_paths],
    }


def check_disk_requirements(requirements: Sequence[Mapping[str, Any]]) -> None:
    """ValueError naming the first requirement whose min_free_gib is not a finite GiB >= 0
    (NaN compares false with everything, so it would pass every disk check)."""
    for index, requirement in enumerate(requirements):
        value = requirement.get("min_free_gib") if isinstance(requirement, Mapping) else None
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        if not (math.isfinite(number) and number >= 0):
            path = requirement.get("path") if isinstance(requirement, Mapping) else None
            raise ValueError(f"disk_requirements[{index}] ({path}): min_free_gib {value!r} is "
                             "not a number of GiB >= 0: give e.g. min_free_gib: 40")


def judge(
    facts: Mapping[str, Any],
    os_name: str,
    os_version: str,
    expected_gpus: int,
    disk_requirements: Sequence[Mapping[str, Any]] = (),
    supported_os: Mapping[str, Sequence[str]] = SUPPORTED_OS,
) -> dict[str, Any]:
    """Judge gathered facts. Errors stop the host; warnings are things later roles fix."""
    check_disk_requirements(disk_requirements)
    errors: list[str] = []
    warnings: list[str] = []

    versions = supported_os.get(os_name, ())
    # Debian reports point releases ("12.8"); a supported "12" covers them.
    if not any(os_version == v or os_version.startswith(f"{v}.") for v in versions):
        wanted = ", ".join(f"{name} {' / '.join(v)}" for name, v in supported_os.items())
        errors.append(f"unsupported OS {os_name} {os_version}: onecat supports {wanted}")

    gpus = list(facts.get("gpus", []))
    if not gpus:
        errors.append(
            "no NVIDIA GPU found on the PCI bus (vendor 0x10de, display/3D class): "
            "check that the cards are seated and visible in `lspci -d 10de:`"
        )
    elif len(gpus) != expected_gpus:
        found = ", ".join(str(gpu["pci_bus_id"]) for gpu in gpus)
        errors.append(
            f"found {len(gpus)} NVIDIA GPU(s) ({found}) but onecat_expected_gpus is "
            f"{expected_gpus}: reseat or replace the missing card, or set onecat_expected_gpus"
        )
    volta = any(gpu.get("architecture") == "volta" for gpu in gpus)

    free_by_path = {disk["path"]: disk for disk in facts.get("disks", [])}
    for requirement in disk_requirements:
        disk = free_by_path.get(requirement["path"])
        if disk is None:
            continue
        if disk["free_gib"] < float(requirement["min_free_gib"]):
            errors.append(
                f"{disk['free_gib']} GiB free at {requirement['path']} (filesystem of "
                f"{disk['measured_at']}) but {requirement['purpose']} needs "
                f"{requirement['min_free_gib']} GiB: free space or point the path elsewhere"
            )

    if facts.get("secure_boot"):
        warnings.append(
            "Secure Boot is on: the NVIDIA kernel module must be signed and its key enrolled (MOK)"
        )
    if facts.get("nouveau_loaded"):
        warnings.append("nouveau is loaded: the driver stage blacklists it and needs a reboot")
    if not facts.get("kernel_headers"):
        warnings.append(
            f"no kernel headers for {facts.get('kernel_release')}: the driver stage installs them"
        )

    architectures = sorted({str(gpu.get("architecture")) for gpu in gpus})
    summary = (
        f"{'ready' if not errors else 'NOT ready'}: {os_name} {os_version}, "
        f"{len(gpus)}/{expected_gpus} GPU(s) [{', '.join(architectures) or 'none'}], "
        f"secure boot {_tri(facts.get('secure_boot'))}, "
        f"nouveau {'loaded' if facts.get('nouveau_loaded') else 'not loaded'}, "
        f"kernel headers {'present' if facts.get('kernel_headers') else 'missing'}"
    )
    return {
        "ok": not errors,
        "volta": volta,
        "errors": errors,
        "warnings": warnings,
        "summary": summary,
    }


def _tri(value: Any) -> str:
    return "unknown" if value is None else ("on" if value else "off")
