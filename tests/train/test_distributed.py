"""Two CPU processes with gloo, started by Lightning's own launcher from `eoscale fit`: DDP and FSDP2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eoscale.cli import main as eoscale_main
from tests.processes import run_cli

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _fit(store: Path, root: Path, strategy: str, *extra: str, steps: int = 4, devices: int = 2) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    report = root / "report"
    result = run_cli(["fit", "--config", str(CONFIGS / "smoke.yaml"), "--config", str(CONFIGS / "strategy" / f"{strategy}.yaml"),
                      "--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
                      "--trainer.accelerator", "cpu", "--trainer.devices", str(devices), "--trainer.max_steps", str(steps),
                      "--trainer.val_check_interval", "2", "--trainer.default_root_dir", str(root),
                      "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={report}",
                      *extra], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return {r: torch.load(report / f"rank{r}.pt", weights_only=True) for r in range(devices)} | {
        f"start{r}": torch.load(report / f"startrank{r}.pt", weights_only=True) for r in range(devices)}


@pytest.mark.slow
def test_ddp_two_ranks_agree(store: Path, tmp_path: Path):
    ranks = _fit(store, tmp_path, "ddp")
    # same seed on every rank: the ranks start from the same weights, and DDP keeps them equal
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, ranks["start1"]["local"][name], rtol=0, atol=0, msg=name)
    assert ranks[0]["world_size"] == 2 and ranks[0]["step"] == ranks[1]["step"] == 4
    for name, value in ranks[0]["local"].items():
        torch.testing.assert_close(value, ranks[1]["local"][name], rtol=0, atol=0, msg=name)
    assert ranks[0]["metrics"]["val_miou"] == ranks[1]["metrics"]["val_miou"]


@pytest.fixture(scope="module")
def fsdp_run(store: Path, tmp_path_factory) -> tuple[Path, dict]:
    """Four steps of FSDP2 (with activation checkpointing) on two gloo ranks; the run folder and reports."""
    root = tmp_path_factory.mktemp("fsdp")
    return root, _fit(store, root, "fsdp", "--trainer.strategy.init_args.activation_checkpointing", "true")


@pytest.mark.slow
def test_fsdp_two_ranks_hold_half_each(fsdp_run):
    tmp_path, ranks = fsdp_run
    assert ranks[0]["step"] == ranks[1]["step"] == 4
    total = ranks[0]["total"]
    held = [sum(v.numel() for v in ranks[r]["local"].values()) for r in (0, 1)]
    assert sum(held) == total  # every element on exactly one rank
    for local in held:  # FSDP2 cuts each tensor along dim 0; odd sizes leave the halves a little uneven
        assert abs(local / total - 0.5) < 0.05, local / total
    # the shards are different slices of one model, not two copies
    name = next(n for n, v in ranks[0]["local"].items() if v.numel() > 1000)
    assert not torch.equal(ranks[0]["local"][name], ranks[1]["local"][name])
    assert ranks[0]["metrics"]["val_miou"] == ranks[1]["metrics"]["val_miou"]
    # a sharded checkpoint folder: one file per rank, plus Lightning's metadata with our band contract
    (last,) = tmp_path.rglob("last.ckpt")
    assert last.is_dir() and len(list(last.glob("*.distcp"))) == 2
    assert torch.load(last / "meta.pt", weights_only=True)["eoscale"]["tile_size"] == 32


@pytest.mark.slow
def test_fsdp_resumes_on_another_world_size_and_consolidates(fsdp_run, store: Path, tmp_path: Path):
    run, _ = fsdp_run
    (sharded,) = run.rglob("last.ckpt")
    # one file of the two shards, through the eoscale command table
    consolidated = tmp_path / "full.ckpt"
    assert eoscale_main(["consolidate", str(sharded), str(consolidated)]) == 0
    full = torch.load(consolidated, weights_only=True)
    assert full["global_step"] == 4 and full["eoscale"]["bands"][0] == "B02"
    assert full["optimizer_states"][0]["state"]  # AdamW moments, keyed by parameter position

    # the sharded checkpoint of two ranks resumes on one rank: it starts from exactly the saved weights
    ranks = _fit(store, tmp_path / "one", "fsdp", "--ckpt_path", str(sharded), steps=6, devices=1)
    assert ranks["start0"]["step"] == 4 and ranks[0]["step"] == 6
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, full["state_dict"][name], rtol=0, atol=0, msg=name)

    # the consolidated file resumes a plain single-device run
    ranks = _fit(store, tmp_path / "single", "ddp", "--ckpt_path", str(consolidated), "--trainer.strategy", "auto",
                 steps=6, devices=1)
    assert ranks["start0"]["step"] == 4 and ranks[0]["step"] == 6
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, full["state_dict"][name], rtol=0, atol=0, msg=name)
