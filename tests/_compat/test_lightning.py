"""Lightning's private names eoscale uses (`eoscale._compat.lightning`) are there in the installed version."""

from __future__ import annotations

from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, ModelParallelStrategy

from eoscale._compat import lightning as compat


def test_installed_lightning_is_the_checked_one():
    assert compat.CHECKED.holds() and compat.ZERO_HOOKS.holds()


def test_device_mesh_is_none_until_set_up():
    assert compat.device_mesh(ModelParallelStrategy()) is None
    assert compat.device_mesh(DDPStrategy()) is None and compat.device_mesh(None) is None


def test_the_sharded_checkpoint_helpers_exist(tmp_path):
    assert compat.is_sharded_checkpoint(tmp_path) is False  # an empty folder: no metadata file
    assert compat.checkpoint_metadata_file(tmp_path).parent == tmp_path


def test_the_deepspeed_hooks_zero_strategy_overrides_exist():
    for name in ("_setup_model_and_optimizer", "_init_deepspeed_distributed", "_get_process_group_backend",
                 "_create_default_config", "_init_config_if_needed", "_auto_select_batch_size"):
        assert callable(getattr(DeepSpeedStrategy, name)), name
