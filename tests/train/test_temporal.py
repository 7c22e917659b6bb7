"""`eoscale fit` of the temporal configs on a store of 3 dates a tile (`tests.time_stores`): the checkpoint records
the dates (its band contract's `time_steps`) and the temporal network's arguments, from which inference rebuilds
it; a single-date checkpoint refuses a stack and the reverse, in one line; DDP and FSDP2 on two gloo ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from eoscale.cli import main
from eoscale.contract import BandContract, load_checkpoint
from eoscale.data import TileDataModule
from eoscale.errors import BandMismatchError
from eoscale.models.checkpoint import load_network
from tests.processes import run_cli
from tests.time_stores import make_time_store

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def season(tmp_path_factory) -> Path:
    """A store of 3 dates a tile: 32 px tiles in shards of 8 (clouds, a date without observations on some tiles)."""
    return make_time_store(tmp_path_factory.mktemp("season"), steps=3)


def _fit(config: str, store: Path, root: Path, *extra: str, steps: int = 3) -> Path:
    assert main(["fit", "--config", str(CONFIGS / config), "--data.init_args.store", str(store),
                 "--data.init_args.batch_size", "4", "--trainer.max_steps", str(steps), "--trainer.val_check_interval",
                 str(steps), "--trainer.default_root_dir", str(root), "--trainer.logger", "false", *extra]) == 0
    (last,) = root.rglob("last.ckpt")
    return last


@pytest.mark.parametrize("config", ["temporal_utae.yaml", "temporal_prithvi.yaml"])
def test_a_temporal_fit_records_its_dates_and_rebuilds_for_inference(config, season, tmp_path):
    checkpoint = _fit(config, season, tmp_path)
    saved = load_checkpoint(checkpoint)
    contract = BandContract.from_dict(saved["eoscale"])
    assert contract.time_steps == 3 and saved["eoscale"]["time_steps"] == 3
    assert saved["eoscale_model"]["args"]["architecture"] in ("utae", "temporal_vit")
    trained = load_network(checkpoint)
    dm = TileDataModule(str(season), batch_size=4, num_workers=0)
    dm.setup("validate")
    batch = dm.normalise(next(iter(dm.val_dataloader())))
    assert batch["image"].shape == (4, 3, 10, 32, 32)
    with torch.no_grad():
        logits = trained.network(batch["image"], dates=batch["dates"], date_valid=batch["date_valid"])
    assert logits.shape == (4, len(contract.classes), 32, 32) and torch.isfinite(logits).all()


def test_a_stack_for_a_single_date_checkpoint_and_the_reverse_are_refused_in_one_line(season, store, tmp_path):
    one = BandContract(bands=("B02",), mean=(0.0,), std=(1.0,), tile_size=32, classes=())
    stack = BandContract(bands=("B02",), mean=(0.0,), std=(1.0,), tile_size=32, classes=(), time_steps=6)
    for contract, steps, match in ((one, 3, "single-date model and was given a stack of 3 dates"),
                                   (stack, 1, "temporal model of 6 dates and was given one date"),
                                   (stack, 8, "takes at most 6 dates a tile and was given 8")):
        with pytest.raises(BandMismatchError, match=match) as err:
            contract.check_dates(steps)
        assert "\n" not in str(err.value)
    stack.check_dates(6), stack.check_dates(4), one.check_dates(1)  # fewer dates: masked steps
    assert "time_steps" not in one.to_dict()  # a single-date record is what it was
    # end to end: fine-tuning a single-date store from a temporal checkpoint fails in one line, exit 2
    checkpoint = _fit("temporal_utae.yaml", season, tmp_path / "t", steps=1)
    result = run_cli(["fit", "--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
                      "--model.init_args.finetune_from", str(checkpoint), "--trainer.max_steps", "1",
                      "--trainer.default_root_dir", str(tmp_path / "s"), "--trainer.logger", "false"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "temporal model of 3 dates and was given one date" in result.stderr


def _two_ranks(strategy: str, store: Path, root: Path) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    report = root / "report"
    result = run_cli(["fit", "--config", str(CONFIGS / "temporal_utae.yaml"), "--config",
                      str(CONFIGS / "strategy" / f"{strategy}.yaml"), "--data.init_args.store", str(store),
                      "--data.init_args.batch_size", "4", "--data.init_args.max_dates", "2", "--trainer.accelerator", "cpu",
                      "--trainer.devices", "2", "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
                      "--trainer.default_root_dir", str(root), "--trainer.logger", "false",
                      "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={report}",
                      "--trainer.callbacks.probe=true"],
                     cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return {r: torch.load(report / f"rank{r}.pt", weights_only=True) for r in range(2)}


def _assert_ranks_agree(ranks: dict, strategy: str) -> None:
    """Both ranks hold the same buffers (U-TAE's per-date ResNet: BatchNorm running statistics) and map the report's
    fixed stack of dates alike, within 1e-5. Guards issue 45's BatchNorm replicas: under FSDP2 each rank kept the
    statistics of its own batches, so the ranks validated different models."""
    assert ranks[0]["buffers"].keys() == ranks[1]["buffers"].keys() and any("running_mean" in k for k in ranks[0]["buffers"])
    for name, value in ranks[0]["buffers"].items():
        torch.testing.assert_close(ranks[1]["buffers"][name], value, rtol=0, atol=1e-5,
                                   msg=lambda m, name=name: f"{strategy}, {name}: {m}")
    torch.testing.assert_close(ranks[1]["output"], ranks[0]["output"], rtol=0, atol=1e-5,
                               msg=lambda m: f"{strategy}, the ranks' logits: {m}")


@pytest.mark.slow  # two 2-rank fits, tens of seconds
def test_ddp_and_fsdp2_fit_a_stack_of_dates_on_two_ranks(season, tmp_path):
    ddp = _two_ranks("ddp", season, tmp_path / "ddp")
    assert ddp[0]["step"] == ddp[1]["step"] == 3 and ddp[0]["world_size"] == 2
    for name, value in ddp[0]["local"].items():  # DDP keeps the replicas equal
        torch.testing.assert_close(value, ddp[1]["local"][name], rtol=0, atol=0, msg=name)
    _assert_ranks_agree(ddp, "ddp")
    assert ddp[0]["metrics"]["val_miou"] == ddp[1]["metrics"]["val_miou"]
    fsdp = _two_ranks("fsdp", season, tmp_path / "fsdp")
    assert fsdp[0]["step"] == fsdp[1]["step"] == 3
    held = [sum(v.numel() for v in fsdp[r]["local"].values()) for r in (0, 1)]
    assert sum(held) == fsdp[0]["total"] and all(abs(h / fsdp[0]["total"] - 0.5) < 0.05 for h in held)
    _assert_ranks_agree(fsdp, "fsdp")
    assert fsdp[0]["metrics"]["val_miou"] == fsdp[1]["metrics"]["val_miou"]
    (last,) = (tmp_path / "fsdp").rglob("last.ckpt")
    assert torch.load(last / "meta.pt", weights_only=True)["eoscale"]["time_steps"] == 3


def test_plan_counts_the_dates_of_a_sample(season):
    # `eoscale plan` measures a temporal config's activations on a stack of the dates it trains on
    config = str(CONFIGS / "temporal_utae.yaml")
    three = _facts(config, season, "")
    two = _facts(config, season, "    max_dates: 2\n")  # training keeps 2 dates a tile
    assert three.time_steps == 3 and two.time_steps == 2 and three.params == two.params
    # the per-date encoder's activations grow with the dates (the decoder's do not)
    assert 1.2 * two.activations_per_sample < three.activations_per_sample < 1.5 * two.activations_per_sample


def _facts(config: str, store: Path, extra: str):
    from eoscale.train.planning.model_facts import facts_from_config

    override = Path(store).parent / f"plan{len(extra)}.yaml"
    override.write_text(f"data:\n  init_args:\n    store: {store}\n{extra}")
    return facts_from_config([config, str(override)])


@pytest.mark.slow  # a season synthesised, ingested and fitted (about a minute)
def test_predict_maps_a_place_from_its_dated_scenes_with_a_temporal_checkpoint(tmp_path):
    from rio_cogeo.cogeo import cog_validate

    from eoscale.synth import synthesize

    season = synthesize(tmp_path / "season", scenes=2, size=128, seed=2, dates=4).out_dir
    assert main(["ingest", "--time-series", "--scenes", str(season / "scenes" / "place_000" / "*.tif"),
                 "--labels", str(season / "labels" / "place_000_landcover.tif"), "--classes",
                 str(season / "classes.csv"), "--output", str(tmp_path / "season.zarr"), "--tile-size", "32",
                 "--quiet"]) == 0
    checkpoint = _fit("temporal_utae.yaml", tmp_path / "season.zarr", tmp_path / "fit")
    scenes = sorted((season / "scenes" / "place_001").glob("*.tif"))
    assert len(scenes) == 4  # the store's place 0 lacks a date: the model was fitted on stacks of 3
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *map(str, scenes), "--output",
                 str(tmp_path / "four"), "--window", "32", "--no-progress"]) == 2  # more dates than it knows
    scenes = scenes[:3]
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *map(str, scenes), "--output",
                 str(tmp_path / "maps"), "--window", "32", "--no-progress"]) == 0
    (landcover,) = (tmp_path / "maps").glob("*_landcover.tif")  # one map of the place, from all its dates
    assert cog_validate(str(landcover), quiet=True)[0]
    import rasterio

    table = {int(c["code"]) for c in BandContract.from_dict(load_checkpoint(checkpoint)["eoscale"]).classes}
    with rasterio.open(landcover) as src, rasterio.open(scenes[0]) as first:
        assert src.transform == first.transform and src.shape == first.shape
        assert set(np.unique(src.read(1))) - {src.nodata} <= table
    # a single date of a season model is refused in one line, nothing written (issue 47: it was mapped silently, as
    # if the season's other dates were clouded)
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(scenes[0]), "--output",
                 str(tmp_path / "one"), "--window", "32", "--no-progress"]) == 2
    assert not list((tmp_path / "one").glob("*.tif"))
