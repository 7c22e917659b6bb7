"""`eoscale fit|validate|test` on one CPU: every config runs, MLflow gets the run, bad input is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from eoscale.cli import main as eoscale_main
from eoscale.train.launch.main import main
from tests.train.test_configs import LARGE_CONFIGS, MODEL_CONFIGS

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


@pytest.fixture(autouse=True)
def _small(monkeypatch, one_thread):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # one torch thread: the machine's 2 cores are shared


def _common(store: Path, root: Path) -> list[str]:
    return ["--data.init_args.store", str(store), "--data.init_args.num_workers", "0",
            "--data.init_args.batch_size", "4", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
            "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]


@pytest.fixture(scope="module")
def shared_tracking_uri(tmp_path_factory) -> str:
    """One MLflow store for the module's fast dev runs: a new SQLite store is created and migrated in ~2 s,
    which each run paid in its own folder (issue 13: suite time); the logging itself is test_fit_logs_…'s."""
    return f"sqlite:///{tmp_path_factory.mktemp('fast-dev-runs') / 'mlflow.db'}"


# configs of another target kind need a store with that target: configs/regression_smoke.yaml (values) is fitted on a
# store with heights in tests/train/test_regression.py, configs/change_resnet18.yaml on a store of pairs in
# tests/train/test_change.py, configs/temporal_mae_pretrain.yaml (a season only) on a season store in
# tests/train/test_temporal_mae.py
CLASS_CONFIGS = [c for c in MODEL_CONFIGS if c not in LARGE_CONFIGS and "target: values" not in c.read_text()
                 and "ChangeTask" not in c.read_text() and "TemporalMAETask" not in c.read_text()]


@pytest.mark.parametrize("config", CLASS_CONFIGS, ids=lambda p: p.stem)
def test_fast_dev_run(config: Path, store: Path, tmp_path: Path, shared_tracking_uri: str, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared_tracking_uri)
    # fine-tune configs name an MAE export (runs/pretrain/...); a smoke run starts from scratch
    weights = ["--model.init_args.weights", "null"] if "weights:" in config.read_text() else []
    # configs that name their checkpoint folder (runs/pretrain/...) write it under tmp_path, not into the checkout
    main(["fit", "--config", str(config), *_common(store, tmp_path), *weights, "--trainer.fast_dev_run", "true",
          "--checkpoint.dirpath", str(tmp_path / "checkpoints")])


def test_a_full_disk_is_one_line_that_says_how_to_resume(store: Path, tmp_path: Path, capsys):
    code = eoscale_main(["fit", "--config", SMOKE, *_common(store, tmp_path), "--trainer.max_steps", "2",
                         "--trainer.logger", "false", "--trainer.callbacks+=tests.train.helpers.DiskFullAt",
                         "--trainer.callbacks.step=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1] == (
        "eoscale fit: error: No space left on device (checkpoints/last.ckpt): free space (or ask for more quota) or "
        "write to another file system, then run the command again with --ckpt_path last (it resumes)"), err[-3:]


@pytest.mark.slow
def test_fit_logs_to_embedded_mlflow(store: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", SMOKE, *_common(store, tmp_path), "--trainer.max_steps", "6",
          "--trainer.val_check_interval", "3"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    params, metrics = run.data.params, run.data.metrics
    assert params["model.backbone"] == "resnet18" and params["run/strategy"] == "SingleDeviceStrategy"
    assert params["run/world_size"] == "1" and params["run/global_batch_size"] == "4"
    assert params["run/precision"] == "32-true" and "run/git_commit" in params
    for key in ("train_loss_step", "val_loss", "val_miou", "val_accuracy", "val_f1", "lr", "val_iou/Tree cover",
                "throughput/samples_per_s", "throughput/samples_per_s_device", "time/epoch_s", "memory/peak_mb"):
        assert key in metrics, key
    assert 0 <= metrics["val_miou"] <= 1
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "config.yaml" in artifacts
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert figures == {"figures/confusion_val.png", "figures/panels_val.png"}
    best = Path(run.data.tags["best_checkpoint"])
    assert best.is_file() and best.parent.name == "checkpoints"
    assert (best.parent.parent / "metrics.csv").read_text().count("val_miou") >= 2
    # the checkpoint carries its band contract and loads with weights_only
    checkpoint = torch.load(best, weights_only=True)
    assert checkpoint["eoscale"]["bands"][0] == "B02" and checkpoint["eoscale"]["tile_size"] == 32
    assert checkpoint["hyper_parameters"]["in_chans"] == 10
    # and the model contract: the network's constructor arguments, so inference needs no training code
    model = checkpoint["eoscale_model"]
    assert model["args"]["in_chans"] == 10 and model["args"]["img_size"] == 32 and model["finetune"] == "full"
    from eoscale.models.checkpoint import load_network

    assert load_network(best).spec == {"args": model["args"], "finetune": "full", "lora": model["lora"]}

    # validate and test from that checkpoint, through the eoscale command table
    for command in ("validate", "test"):
        assert eoscale_main([command, "--config", SMOKE, *_common(store, tmp_path), "--ckpt_path", str(best)]) == 0
    runs = client.search_runs([run.info.experiment_id])
    assert len(runs) == 3
    assert any("test_miou" in r.data.metrics for r in runs)


def test_unknown_backbone_is_one_line(store: Path, tmp_path: Path, capsys):
    code = eoscale_main(["fit", "--config", SMOKE, *_common(store, tmp_path), "--model.init_args.backbone", "resnet1800"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("eoscale fit: error: unknown timm backbone 'resnet1800'"), err


def test_bad_strategy_is_one_line(store: Path, tmp_path: Path, capsys):
    code = eoscale_main(["fit", "--config", SMOKE, *_common(store, tmp_path), "--trainer.strategy", "fsdpp"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("eoscale fit: error: You selected an invalid strategy"), err


def test_fit_help_is_lightning_clis(capsys):
    with pytest.raises(SystemExit) as exit_info:
        eoscale_main(["fit", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--trainer.max_steps" in out and "--ckpt_path" in out
