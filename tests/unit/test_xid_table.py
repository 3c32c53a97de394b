"""One Xid table (onecat/health/xid.py) for the deploy's health check, the watch and the burn-in;
the module's documentation and the role's defaults say the same codes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from onecat.health import xid
from onecat.health.judge import XID_ERROR_CODES, Thresholds
from onecat.watch.deltas import FATAL_XIDS

REPO = Path(__file__).resolve().parents[2]


def test_every_row_has_a_meaning_a_severity_advice_and_a_source() -> None:
    for code, row in xid.TABLE.items():
        assert row.code == code and row.meaning and row.advice, row
        assert row.severity in (xid.ERROR, xid.WARNING), row
        assert re.search(r"\b(cat|dcgm|gpud)\b", row.source), row


def test_the_judge_the_watch_and_the_module_share_the_table() -> None:
    assert XID_ERROR_CODES == xid.ERROR_CODES == Thresholds().xid_error_codes
    assert frozenset(xid.ERROR_CODES) == FATAL_XIDS
    # The reading of NVIDIA's catalog, DCGM and gpud: these do not drain a node.
    assert not {13, 31, 43, 45, 54, 56, 57, 58, 63, 92, 94, 154} & set(xid.ERROR_CODES)
    assert {48, 64, 74, 79, 95} <= set(xid.ERROR_CODES)


def test_the_module_docs_and_the_role_default_name_the_same_codes() -> None:
    codes = ", ".join(map(str, xid.ERROR_CODES))
    module = (REPO / "library" / "gpu_health.py").read_text()
    documentation = yaml.safe_load(module.split('DOCUMENTATION = r"""')[1].split('"""')[0])
    assert documentation["options"]["xid_error_codes"]["default"] == list(xid.ERROR_CODES)
    defaults = (REPO / "roles" / "gpu_health" / "defaults" / "main.yml").read_text()
    assert f"(onecat/health/xid.py: {codes}," in defaults
    assert yaml.safe_load(defaults)["gpu_health_xid_error_codes"] is None
