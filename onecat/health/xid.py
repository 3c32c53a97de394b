"""NVIDIA Xid events: what each code means, how severe it is, what to do. One table for the
deploy's health check (onecat/health/judge.py, library/gpu_health.py) and the watch and the
burn-in (onecat/watch/deltas.py).

Severity: "error" drains the node (the card or its memory failed, or the GPU needs a reset or
a reboot); "warning" is reported and does not. The rule: an error where NVIDIA's Xid catalog
asks for RESET_GPU, RESTART_BM (a reboot) or a memory/NVLink workflow, or where DCGM's health
watch fails the GPU; where the sources disagree, NVIDIA and DCGM over gpud (the strictest).
Sources, per row:
  cat    NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
         (immediate / investigatory action; read through gpud's generated copy,
         leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go, 2025-10-29).
         The catalog covers Ampere and newer; Volta's older-GPU page could not be read, so the
         meanings are the current catalog's.
  dcgm   NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp BuildXidMappings(): FAIL or WARN.
  gpud   leptonai/gpud components/accelerator/nvidia/xid/xid.go: Fatal or Warning.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Xid:
    code: int
    meaning: str
    severity: str
    advice: str
    source: str


TABLE: dict[int, Xid] = {x.code: x for x in (
    Xid(13, "graphics engine exception", WARNING,
        "an application error, or a sign of a failing card if it repeats with others",
        "cat RESTART_APP; gpud Warning"),
    Xid(31, "GPU memory page fault", WARNING,
        "usually the application's bug; check the card if it repeats",
        "cat RESTART_APP; dcgm WARN; gpud Warning"),
    Xid(43, "GPU stopped processing", WARNING,
        "the application's channel was stopped; follow the Xid logged with it",
        "cat IGNORE; dcgm WARN; gpud Warning"),
    Xid(45, "preemptive cleanup after an earlier error", WARNING,
        "follow the Xid logged before it", "cat IGNORE (follow other Xid); gpud Warning"),
    Xid(46, "GPU stopped processing", ERROR,
        "drain the node and reset the GPU (or reboot); replace the card if it repeats",
        "cat RESET_GPU; gpud Fatal"),
    Xid(48, "double-bit ECC error", ERROR,
        "drain the node, reset the GPU or reboot so the page is retired; replace the card if "
        "errors return", "cat WORKFLOW_XID_48; dcgm FAIL; gpud Fatal"),
    Xid(54, "auxiliary power is not connected to the GPU board", WARNING,
        "check the card's auxiliary power cables (8-pin/EPS) at the next maintenance",
        "cat CHECK_MECHANICALS; dcgm WARN; gpud Warning"),
    Xid(56, "display engine error", WARNING,
        "a V100 drives no display: report it if it repeats",
        "cat unused, CONTACT_SUPPORT; dcgm WARN; gpud Warning"),
    Xid(57, "error programming video memory interface", WARNING,
        "report it if it repeats", "cat unused, CONTACT_SUPPORT; dcgm WARN; gpud Warning"),
    Xid(58, "unstable video memory interface detected (EDC error)", WARNING,
        "report it if it repeats", "cat unused, CONTACT_SUPPORT; dcgm WARN; gpud Warning"),
    Xid(61, "internal micro-controller breakpoint", ERROR,
        "reset the GPU or reboot; replace the card if it repeats",
        "cat CONTACT_SUPPORT; dcgm WARN; gpud Fatal (the Debug Guidelines: reset the GPU)"),
    Xid(62, "internal micro-controller halt", ERROR,
        "reset the GPU or reboot; replace the card if it repeats",
        "cat RESET_GPU; dcgm WARN; gpud Fatal"),
    Xid(63, "ECC page retirement or row remapping event", WARNING,
        "a page was retired: reboot at a convenient time so the retirement takes effect (with "
        "Xid 48 on the same GPU the double-bit error is the fault to act on)",
        "cat IGNORE; dcgm WARN; gpud Fatal; NVIDIA's page-retirement doc: reload the driver "
        "to activate"),
    Xid(64, "ECC page retirement or row remapping failure", ERROR,
        "the memory repair failed: take the card out of service and replace it",
        "cat RESET_GPU; dcgm FAIL; gpud Fatal"),
    Xid(74, "NVLink error", ERROR,
        "reseat the NVLink bridge (or check the SXM2 board), then reset the GPU",
        "cat WORKFLOW_NVLINK_ERR; dcgm FAIL; gpud Fatal"),
    Xid(79, "GPU has fallen off the bus", ERROR,
        "reseat the card, check its power cables and riser, then reboot",
        "cat RESTART_BM; dcgm FAIL; gpud Fatal"),
    Xid(92, "high single-bit ECC error rate", WARNING,
        "the memory is wearing: plan a replacement", "cat IGNORE, CONTACT_SUPPORT; gpud Warning"),
    Xid(94, "contained ECC error", WARNING,
        "the application that hit it was stopped; watch for repeats (Ampere and newer)",
        "cat RESTART_APP; dcgm WARN; gpud Fatal"),
    Xid(95, "uncontained ECC error", ERROR,
        "drain the node, reset the GPU or reboot, and replace the card if it repeats",
        "cat RESET_GPU; dcgm FAIL; gpud Fatal"),
    Xid(119, "GSP RPC timeout", ERROR, "reset the GPU or reboot (no GSP on a V100)",
        "cat RESET_GPU; dcgm FAIL; gpud Fatal"),
    Xid(154, "GPU recovery action changed", WARNING,
        "do what the log line after it asks (GPU reset, reboot or drain); it reports another Xid",
        "cat informational (follow the other Xid); gpud Warning"),
)}

# The codes that drain a node; every other Xid (known or not) is a warning.
ERROR_CODES: tuple[int, ...] = tuple(sorted(c for c, x in TABLE.items() if x.severity == ERROR))
