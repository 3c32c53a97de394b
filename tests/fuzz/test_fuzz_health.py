"""Fuzz the health inputs a user or a node can hand onecat: the kernel log text (Xid lines),
and preflight's disk requirements."""

from __future__ import annotations

import math

from fuzzkit import examples, fuzz
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.health.nvml import parse_xid
from onecat.preflight.checks import judge

XID_LINES = st.sampled_from((
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "[ 12.3] NVRM: Xid (PCI:0000:D8:00): 48, An uncorrectable double bit error",
    "NVRM: Xid (PCI:zzzz): 48, x", "NVRM: Xid (PCI:0000:3b:00): 99999999999999999999, x",
    "NVRM: Xid (PCI:0000:3b:00):", "NVRM: Xid", "kernel: usb 1-1: new device",
))


@settings(max_examples=examples(200))
@given(text=st.lists(XID_LINES | st.text(max_size=40), max_size=12).map("\n".join))
@fuzz("health: kernel log Xid lines")
def test_fuzz_kernel_log(text: str) -> None:
    for event in parse_xid(text):
        assert isinstance(event["code"], int) and event["count"] >= 1
        assert isinstance(event["pci_bus_id"], str)


FACTS = {"os": {"name": "Debian", "version": "12"}, "gpus": [], "secure_boot": False,
         "nouveau_loaded": False, "kernel_release": "6.1.0", "kernel_headers": True,
         "disks": [{"path": "/var/lib/docker", "measured_at": "/var/lib", "free_gib": 50.0,
                    "total_gib": 100.0}]}


@settings(max_examples=examples(150))
@given(minimum=st.floats(allow_nan=True, allow_infinity=True) | st.integers()
       | st.text(max_size=6), free=st.floats(0, 1e6))
@example(minimum=math.nan, free=1.0)
@fuzz("preflight: disk requirements")
def test_fuzz_disk_requirements(minimum: object, free: float) -> None:
    facts = {**FACTS, "disks": [{**FACTS["disks"][0], "free_gib": free}]}
    requirement = {"path": "/var/lib/docker", "min_free_gib": minimum, "purpose": "images"}
    try:
        verdict = judge(facts, os_name="Debian", os_version="12", expected_gpus=0,
                        disk_requirements=[requirement])
    except ValueError as error:
        assert "min_free_gib" in str(error) and "\n" not in str(error)
        return
    short = [e for e in verdict["errors"] if "/var/lib/docker" in e]
    assert bool(short) == (free < float(minimum)), (free, minimum, verdict["errors"])
