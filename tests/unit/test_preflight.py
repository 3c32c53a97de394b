"""Preflight's reading of recorded sysfs trees and its judgement."""

from __future__ import annotations

from pathlib import Path

import pytest

from onecat.preflight.checks import gather, judge, secure_boot_state
from onecat.preflight.pci import gpu_architecture, scan_nvidia_gpus

SYSFS = Path(__file__).parents[1] / "fixtures" / "sysfs"


def facts_for(tree: str, **overrides: object) -> dict:
    facts = gather(sysfs_root=str(SYSFS / tree), modules_root="/nonexistent", disk_paths=())
    facts.update(overrides)
    return facts


def test_scan_finds_both_pcie_v100s_and_skips_other_devices():
    gpus = scan_nvidia_gpus(str(SYSFS / "pcie-pair"))
    assert [g["pci_bus_id"] for g in gpus] == ["0000:3b:00.0", "0000:d8:00.0"]
    assert {g["name"] for g in gpus} == {"Tesla V100-PCIE-16GB"}
    assert {g["architecture"] for g in gpus} == {"volta"}


def test_nvidia_audio_function_is_not_a_gpu():
    assert scan_nvidia_gpus(str(SYSFS / "no-gpu")) == []


def test_missing_sysfs_reads_as_no_gpus():
    assert scan_nvidia_gpus("/nonexistent") == []


@pytest.mark.parametrize(
    ("device_id", "arch"),
    [(0x1DB4, "volta"), (0x1DF6, "volta"), (0x1EB8, "turing"), (0x20B0, "ampere"),
     (0x2331, "hopper"), (0x2684, "ada"), (0x1234, "unknown")],
)
def test_architecture_by_device_id(device_id, arch):
    assert gpu_architecture(device_id) == arch


def test_secure_boot_state_from_the_efi_variable():
    assert secure_boot_state(str(SYSFS / "secure-boot")) is True
    assert secure_boot_state(str(SYSFS / "nvlink-pair")) is False
    assert secure_boot_state(str(SYSFS / "pcie-pair")) is None


def test_healthy_pcie_pair_is_ready_with_header_warning():
    verdict = judge(facts_for("pcie-pair"), "Debian", "12.8", expected_gpus=2)
    assert verdict["ok"] is True
    assert verdict["volta"] is True
    assert verdict["errors"] == []
    assert verdict["warnings"] == [
        f"no kernel headers for {facts_for('pcie-pair')['kernel_release']}: "
        "the driver stage installs them"
    ]
    assert verdict["summary"].startswith(
        "ready: Debian 12.8, 2/2 GPU(s) [volta], secure boot unknown"
    )


def test_nouveau_and_secure_boot_are_warnings_not_errors():
    nvlink = judge(facts_for("nvlink-pair", kernel_headers=True), "Ubuntu", "22.04", 2)
    assert nvlink["ok"] is True
    assert nvlink["warnings"] == [
        "nouveau is loaded: the driver stage blacklists it and needs a reboot"
    ]
    secure = judge(facts_for("secure-boot", kernel_headers=True), "Ubuntu", "24.04", 2)
    assert secure["warnings"] == [
        "Secure Boot is on: the NVIDIA kernel module must be signed and its key enrolled (MOK)"
    ]


def test_no_gpu_host_is_stopped_with_the_reason():
    verdict = judge(facts_for("no-gpu"), "Debian", "12", expected_gpus=2)
    assert verdict["ok"] is False
    assert verdict["errors"] == [
        "no NVIDIA GPU found on the PCI bus (vendor 0x10de, display/3D class): "
        "check that the cards are seated and visible in `lspci -d 10de:`"
    ]


def test_missing_card_names_what_was_found():
    verdict = judge(facts_for("single-gpu"), "Debian", "12", expected_gpus=2)
    assert verdict["errors"] == [
        "found 1 NVIDIA GPU(s) (0000:3b:00.0) but onecat_expected_gpus is 2: "
        "reseat or replace the missing card, or set onecat_expected_gpus"
    ]


def test_non_volta_pair_is_ready_and_not_volta():
    verdict = judge(facts_for("h100-pair"), "Ubuntu", "24.04", expected_gpus=2)
    assert verdict["ok"] is True
    assert verdict["volta"] is False


@pytest.mark.parametrize(
    ("name", "version"),
    [("Debian", "11.9"), ("Ubuntu", "20.04"), ("Ubuntu", "22.040"), ("CentOS", "7")],
)
def test_unsupported_os_is_refused_by_name_and_version(name, version):
    verdict = judge(facts_for("pcie-pair"), name, version, expected_gpus=2)
    assert verdict["ok"] is False
    assert verdict["errors"] == [
        f"unsupported OS {name} {version}: onecat supports Ubuntu 22.04 / 24.04, Debian 12"
    ]


def test_low_disk_is_an_error_naming_path_and_purpose():
    facts = facts_for(
        "pcie-pair",
        disks=[{"path": "/srv/models", "measured_at": "/srv", "free_gib": 12.5, "total_gib": 50}],
    )
    requirement = {"path": "/srv/models", "min_free_gib": 30, "purpose": "the model checkpoints"}
    verdict = judge(facts, "Debian", "12", 2, disk_requirements=[requirement])
    assert verdict["errors"] == [
        "12.5 GiB free at /srv/models (filesystem of /srv) but the model checkpoints needs "
        "30 GiB: free space or point the path elsewhere"
    ]


def test_disk_free_measures_the_nearest_existing_parent(tmp_path):
    facts = gather(sysfs_root="/nonexistent", disk_paths=[str(tmp_path / "not" / "yet")])
    (disk,) = facts["disks"]
    assert disk["measured_at"] == str(tmp_path)
    assert disk["free_gib"] > 0
