"""The health stage's textfile (onecat/health/metrics.py): a node held out still reports."""

from __future__ import annotations

from onecat.health.metrics import render

GPU = {"index": 1, "uuid": "GPU-1", "pci_bus_id": "00000000:3C:00.0",
       "name": "Tesla V100-PCIE-16GB", "ecc": {"volatile": {"uncorrected": 2}}}


def test_a_held_node_reports_its_verdict_and_the_card_at_fault() -> None:
    lost = {"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:3B:00.0", "lost": True}
    facts = {"verdict": "unhealthy", "gpus": [lost, GPU],
             "problems": [{"severity": "error", "message": "ECC"},
                          {"severity": "warning", "message": "warm"}]}
    lines = render(facts, 1_800_000_000.4).splitlines()
    card = 'gpu="1",UUID="GPU-1",pci_bus_id="00000000:3C:00.0",modelName="Tesla V100-PCIE-16GB"'
    assert "onecat_health_verdict 2" in lines
    assert "onecat_health_checked_timestamp_seconds 1800000000" in lines
    assert 'onecat_health_problems{severity="error"} 1' in lines
    assert 'onecat_health_problems{severity="warning"} 1' in lines
    assert f"onecat_health_gpu_ecc_uncorrected_volatile{{{card}}} 2" in lines
    assert f"onecat_health_gpu_lost{{{card}}} 0" in lines
    # A lost card is lost, with no counter NVML could not read.
    assert any(line.startswith('onecat_health_gpu_lost{gpu="0"') and line.endswith(" 1")
               for line in lines)
    assert not any(line.startswith('onecat_health_gpu_ecc_uncorrected_volatile{gpu="0"')
                   for line in lines)
    # Names of its own: node_exporter refuses two files that write one family.
    families = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    assert all(name.startswith("onecat_health_") for name in families)


def test_a_healthy_node_is_zero_and_a_hostile_reading_stays_one_line() -> None:
    odd = {**GPU, "name": 'V100"\nevil{x="1"} 9', "ecc": {"volatile": {"uncorrected": 0}}}
    text = render({"verdict": "healthy", "gpus": [odd], "problems": []}, 0.0)
    lines = text.splitlines()
    assert "onecat_health_verdict 0" in lines
    assert 'onecat_health_problems{severity="error"} 0' in lines
    samples = [line for line in lines if not line.startswith("#")]
    assert all(line.startswith("onecat_health_") for line in samples), samples
    assert 'modelName="V100\\"\\nevil{x=\\"1\\"} 9"' in text
