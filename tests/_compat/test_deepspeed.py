"""DeepSpeed's private names eoscale patches (`eoscale._compat.deepspeed`) are there, and the patch applies once."""

from __future__ import annotations

import pytest

from eoscale._compat import deepspeed as compat


def test_installed_deepspeed_is_the_checked_one():
    assert compat.CHECKED.holds()


def test_the_fp32_partition_patch_applies_once():
    compat.import_deepspeed()
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Stage3

    compat.share_fp32_master_partitions()
    patched = Stage3._create_fp32_partitions
    assert patched.eoscale_shares_fp32
    compat.share_fp32_master_partitions()
    assert Stage3._create_fp32_partitions is patched


def test_the_shm_op_is_there_to_stub(monkeypatch):
    import importlib

    comm = importlib.import_module("deepspeed.comm.torch")
    assert callable(comm.build_shm_op)
    monkeypatch.setattr(comm, "build_shm_op", comm.build_shm_op)  # restored after the test
    compat.skip_shm_op()
    assert comm.build_shm_op() is None


def test_outside_the_checked_versions_it_says_so_in_one_line(monkeypatch):
    from eoscale._compat import UnsupportedVersionError

    monkeypatch.setattr(type(compat.CHECKED), "installed", lambda self: "0.99.0")
    with pytest.raises(UnsupportedVersionError, match=r"deepspeed 0.99.0 is outside >=0.19,<0.20"):
        compat.skip_shm_op()
