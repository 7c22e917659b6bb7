"""`eoscale bench adapters` runs end to end on a tiny store and records its figures (no value is judged)."""

from __future__ import annotations

import argparse
import json

import pytest

from eoscale.bench.adapters import _compare, configure, lora_fractions, show
from eoscale.cli import main


def _run(method: str, *, adapter: int = 0) -> dict:
    return {"method": method, "val_miou": 0.5, "step_seconds_median": 0.2 if adapter else 0.3,
            "peak_rss_bytes": 2**30, "state_bytes": 2**20 if adapter else 2**22, "cuda_max_allocated_bytes": None,
            "parameters": {"backbone": 1000, "adapter": adapter, "head": 50, "trainable": adapter + 50 if adapter else 1050}}


def test_ratios_and_table_from_figures(capsys):
    runs = {"1": {"full": _run("full"), "lora": _run("lora", adapter=8) | {"adapter_megabytes": 0.1}},
            "0.1": {"full": _run("full")}}
    ratios = _compare(runs)
    assert ratios["lora_parameters"]["adapter_vs_backbone"] == pytest.approx(0.008)
    assert ratios["lora_vs_full"] == pytest.approx({"step_time": 2 / 3, "peak_rss": 1.0, "state_bytes": 0.25})
    show({"steps": 5, "batch_size": 2, "model": "m", "patch_size": 8, "fractions": [1.0, 0.1], "runs": runs,
          "lora": {"r": 4}, "mae": None, **ratios})
    out = capsys.readouterr().out
    assert "0.80% of the backbone" in out and "meets the goal" in out and "0.67×" in out


def test_lora_fraction_of_vit_s8_meets_the_goal_at_rank_4():
    (r4, r8) = lora_fractions(("vit_small_patch16_224",), (4, 8), in_chans=10, num_classes=8, img_size=64)
    assert r4["adapter"] == 12 * 4 * ((384 + 3 * 384) + (384 + 384))  # qkv and proj of 12 blocks
    assert r4["meets_goal"] and not r8["meets_goal"]


def test_command_line_options():
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["tiles.zarr", "--steps", "7", "--methods", "lora", "full"])
    assert (args.steps, args.methods, args.fractions, args.threads, args.backbone) == (7, ["lora", "full"], [1, 0.1, 0.01], 1, None)
    assert (args.ssl, args.pretrain_store, args.heldout, args.mae_norm_pix_loss) == ("mae", None, None, True)


def test_missing_backbone_file_is_one_line(tmp_path, capsys):
    from tests.stores import make_store

    store = make_store(tmp_path / "s", size=64)
    code = main(["bench", "adapters", str(store), "--backbone", str(tmp_path / "none.safetensors")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no backbone file" in err[0]


@pytest.mark.slow
def test_bench_adapters_records_every_fit(tmp_path, capsys):
    from tests.stores import make_store

    store = make_store(tmp_path / "store")
    other = make_store(tmp_path / "other", seed=5)  # other scenes: the pretraining store and the held-out one
    code = main(["bench", "adapters", str(store), "--pretrain-store", str(other), "--heldout", str(other),
                 "--model", "vit_tiny_patch16_224", "--mae-steps", "3", "--mae-batch-size", "4", "--mae-norm-pix-loss", "false",
                 "--steps", "4", "--batch-size", "4", "--fractions", "1", "0.5", "--decoder-channels", "8",
                 "--methods", "lora",  # each fit is a whole `eoscale fit` (~20 s here); linear/full: tests/models/test_lora.py
                 "--recipe", "tiny", "--mlflow", str(tmp_path / "mlflow"), "--record", str(tmp_path / "bench")])
    assert code == 0
    figures = json.loads((tmp_path / "bench" / "adapters.json").read_text())[-1]
    assert figures["machine"]["cores_available"] >= 1 and figures["threads"] == 1
    assert figures["mae"]["steps"] == 3 and figures["mae"]["backbone"].endswith("backbone.safetensors")
    assert figures["mae"]["store"] == str(other) and figures["mae"]["recipe"]["norm_pix_loss"] is False
    assert figures["recipe"] == "tiny" and set(figures["runs"]) == {"1", "0.5"}
    for runs in figures["runs"].values():
        assert set(runs) == {"lora"}
        for fit in runs.values():
            assert 0 <= fit["val_miou"] <= 1 and fit["steps"] == 4 and fit["step_seconds_median"] > 0
            assert 0 <= fit["heldout"]["miou"] <= 1 and fit["heldout"]["tiles"] > 0
            assert fit["peak_rss_bytes"] > 0 and fit["state_bytes"] > 0
    one = figures["runs"]["1"]
    lora = one["lora"]["parameters"]
    assert 0 < lora["adapter"] < lora["backbone"] and lora["trainable"] == lora["adapter"] + lora["head"]
    assert one["lora"]["adapter_megabytes"] > 0
    assert 0 < figures["lora_parameters"]["adapter_vs_backbone"] < 1
    assert {c["model"] for c in figures["lora_fraction_by_model"]} == {"vit_tiny_patch16_224", "vit_small_patch16_224"}
    assert "held-out mIoU after 4 steps" in capsys.readouterr().out
    from mlflow import MlflowClient

    # a client, not mlflow.set_tracking_uri: that also sets MLFLOW_TRACKING_URI in os.environ, and every later
    # test's subprocesses then logged into this store
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("bench-adapters").experiment_id])
    names = {r.info.run_name for r in runs}
    assert names == {"tiny/mae", "tiny/lora-1", "tiny/lora-0.5"}
