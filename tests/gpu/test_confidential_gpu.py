"""Confidential computing mode as NVML reports it on a real GPU machine (the lent machines run
without it). Skipped without a GPU."""

from __future__ import annotations

import pytest

from xferscope.core import machine

pytestmark = pytest.mark.gpu


def test_the_machine_says_whether_it_runs_in_confidential_computing_mode(native_engine):
    facts = machine.collect(native_engine, [0])
    cc = facts["confidential_computing"]
    # NVML answers on a driver from 535 on; a machine outside CC mode says so
    assert cc is not None, "NVML gave no confidential computing state"
    assert isinstance(cc["enabled"], bool) and cc["environment"] is not None
