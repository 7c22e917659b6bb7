"""Every YAML under configs/ parses and instantiates through `eoscale fit`'s parser (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eoscale.train.launch.cli import EoscaleCLI

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
OPTIONS = {CONFIGS / "profile.yaml"}  # options of any run, not a model: `--config configs/profile.yaml` = `--profile`
MODEL_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if p not in OPTIONS)
# backbones too large to train even one step in the suite (a ViT-L step on 2 CPU cores took 33 s): parsed and
# instantiated here, not fast-dev-run (issue 17: "the large configs are parse-tested")
LARGE_CONFIGS = {CONFIGS / "vit_l16_seg.yaml", CONFIGS / "mae_vit_h14_pretrain.yaml"}
FRAGMENTS = sorted(p for p in CONFIGS.glob("strategy/*.yaml"))  # go with any model config
# overlays of one config each: the quick start's recipe (pipelines/quickstart.yaml), its fine-tuning on a sample's
# labelling points (pipelines/active-learning.yaml) and the season pipelines' U-TAE (pipelines/season.yaml and
# season-fused.yaml; fitted on a store of dates in tests/test_season_pipeline.py and test_season_fused_pipeline.py)
OVERLAYS = {CONFIGS / "quickstart" / "fit.yaml": CONFIGS / "resnet18_seg.yaml",
            CONFIGS / "quickstart" / "finetune.yaml": CONFIGS / "resnet18_seg.yaml",
            CONFIGS / "quickstart" / "season.yaml": CONFIGS / "temporal_utae.yaml",
            CONFIGS / "quickstart" / "season-fused.yaml": CONFIGS / "temporal_utae.yaml"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One working folder and MLflow store for the module: MLflow creates and migrates a new SQLite store in
    ~2 s, which each instantiation here paid when each ran in its own folder (issue 13: suite time)."""
    return tmp_path_factory.mktemp("configs")


@pytest.fixture(autouse=True)
def _shared_store(workdir: Path, monkeypatch):
    monkeypatch.chdir(workdir)  # relative stores (the quick start's overlays name one) are made once too
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")


def test_every_config_is_covered():
    assert {p.name for p in MODEL_CONFIGS} >= {"smoke.yaml", "resnet18_seg.yaml", "vit_s16_seg.yaml"}
    assert {p.name for p in FRAGMENTS} >= {"ddp.yaml", "fsdp.yaml"}
    assert set(CONFIGS.rglob("*.yaml")) == set(MODEL_CONFIGS) | set(FRAGMENTS) | set(OVERLAYS) | OPTIONS


def test_the_profile_fragment_is_the_profile_flag(store: Path, tmp_path: Path):
    from eoscale.train.callbacks.profiling import Profiling

    common = ["--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
              "--trainer.default_root_dir", str(tmp_path)]
    for extra in (["--config", str(CONFIGS / "profile.yaml")], ["--profile.enabled=true"]):
        cli = EoscaleCLI(args=[*common, *extra], run=False)
        (profiling,) = [c for c in cli.trainer.callbacks if isinstance(c, Profiling)]
        assert profiling.enabled and profiling.schedule.steps == 5


@pytest.mark.parametrize("overlay", sorted(OVERLAYS), ids=lambda p: f"quickstart-{p.stem}")
def test_overlay_parses_on_its_config(overlay: Path, store: Path, tmp_path: Path):
    cli = EoscaleCLI(args=["--config", str(OVERLAYS[overlay]), "--config", str(overlay), "--data.init_args.store",
                           str(store), "--trainer.default_root_dir", str(tmp_path)], run=False)
    # the overlay names every setting its measured recipe depends on, so the base config's defaults can move
    # (class weights, loss, the spectral MLP) without changing the quick start
    recipe = yaml.safe_load(overlay.read_text())
    assert {k: cli.model.hparams[k] for k in recipe["model"]["init_args"]} == recipe["model"]["init_args"]
    assert cli.trainer.max_steps == recipe["trainer"]["max_steps"]
    if overlay.name == "fit.yaml":
        hparams = cli.model.hparams
        assert (hparams.backbone, hparams.weights, hparams.loss, hparams.class_weights, hparams.spectral_mlp) == (
            "resnet18", None, "ce", False, 0)
        assert cli.datamodule.batch_size == 16 and cli.trainer.max_steps == 600
    if overlay.name == "finetune.yaml":  # the quick start's network, so that its checkpoint's weights fit
        fit = yaml.safe_load((CONFIGS / "quickstart" / "fit.yaml").read_text())["model"]["init_args"]
        network = {k: v for k, v in fit.items() if k not in ("lr", "warmup_steps")}
        assert {k: recipe["model"]["init_args"][k] for k in network} == network
        assert cli.model.hparams.finetune_from == "runs/quickstart/fit/checkpoints/last.ckpt"


@pytest.mark.parametrize("fragment", [None, *FRAGMENTS], ids=lambda p: p.stem if p else "single")
@pytest.mark.parametrize("config", MODEL_CONFIGS, ids=lambda p: p.stem)
def test_config_parses(config: Path, fragment: Path | None, store: Path, tmp_path: Path):
    args = ["--config", str(config)] + (["--config", str(fragment)] if fragment else [])
    if fragment is not None and fragment.stem == "pipeline" and not config.stem.startswith("mae"):
        from eoscale.errors import InputError

        with pytest.raises(InputError, match="pipelines MAE pretraining only"):  # before the model is built
            EoscaleCLI(args=[*args, "--data.init_args.store", str(store)], run=False)
        return
    cli = EoscaleCLI(args=[*args, "--data.init_args.store", str(store), "--trainer.default_root_dir", str(tmp_path)],
                     run=False)
    assert cli.model.hparams.backbone
    assert cli.datamodule.num_bands == 10
    if fragment is not None and fragment.stem == "fsdp":
        from eoscale.train.strategies.fsdp import FSDP2Strategy

        assert isinstance(cli.trainer.strategy, FSDP2Strategy)
    if fragment is not None and fragment.stem.startswith("zero"):
        from eoscale.train.strategies.zero import ZeroStrategy

        # the fragment's own stage ('in (2, 3)' held for a ZeRO-3 fragment read as stage 2)
        stage = yaml.safe_load(fragment.read_text())["trainer"]["strategy"]["init_args"]["stage"]
        assert cli.trainer.strategy.zero_stage == stage and isinstance(cli.trainer.strategy, ZeroStrategy)


def test_unknown_key_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        EoscaleCLI(args=["fit", "--config", str(CONFIGS / "smoke.yaml"), "--model.init_args.learning_rate", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "learning_rate" in err, err
