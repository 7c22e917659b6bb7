"""The MLflow Model Registry: a checkpoint (with its adapter and band contract) registered in a SQLite store, then
resolved from `models:/NAME/VERSION` and `models:/NAME@ALIAS` offline, as `predict` and `serve` do."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow import MlflowClient

from eoscale.cli import main
from eoscale.contract import read_contract
from eoscale.infer.model import load_model
from eoscale.track.registry import register_checkpoint, resolve_checkpoint
from eoscale.track.store import artifact_location
from tests.serve.conftest import make_adapted_checkpoint


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    checkpoint = make_adapted_checkpoint(root / "fit")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("eoscale", artifact_location=artifact_location(uri))
    run = client.create_run(experiment).info.run_id
    first = register_checkpoint(checkpoint, name="landcover", run_id=run, tracking_uri=uri, adapters_root=root / "fit")
    second = register_checkpoint(checkpoint, name="landcover", run_id=run, tracking_uri=uri,
                                 adapters_root=root / "fit", alias="champion")
    return checkpoint, uri, (first, second)


def test_registered_checkpoints_resolve_by_version_and_alias(registered):
    checkpoint, uri, versions = registered
    assert versions == ("1", "2")
    by_version = resolve_checkpoint("models:/landcover/1", tracking_uri=uri)
    by_alias = resolve_checkpoint("models:/landcover@champion", tracking_uri=uri)
    assert by_alias.is_file() and by_alias.name == "model.ckpt" and by_version.is_file()
    assert by_alias.read_bytes() == checkpoint.read_bytes()
    assert json.loads((by_alias.parent / "contract.json").read_text()) == read_contract(checkpoint).to_dict()
    # the adapter travels with it: predict --adapter finds it beside the registered checkpoint
    here, there = load_model(checkpoint, adapter="alps"), load_model(by_alias, adapter="alps")
    x = torch.randn(2, 10, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(here.network(x), there.network(x))
    version = MlflowClient(uri).get_model_version("landcover", "2")
    assert version.tags["eoscale.tile_size"] == "32" and version.tags["eoscale.bands"].startswith("B02,")
    assert resolve_checkpoint("runs/best.ckpt") == type(by_alias)("runs/best.ckpt")  # a path stays a path


def test_unknown_models_are_one_line_errors(registered, tmp_path, capsys):
    _, uri, _ = registered
    assert main(["serve", "--checkpoint", "models:/landcover/7", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no version 7 of registered model 'landcover'" in err
    assert "registered models: landcover" in err
    assert main(["predict", "--checkpoint", "models:/landcover@nobody", "--tracking-uri", uri, "--input", "x.tif",
                 "--output", str(tmp_path)]) == 2
    assert "no alias @nobody" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", "models:/landcover", "--tracking-uri", uri]) == 2
    assert "give models:/NAME/VERSION or models:/NAME@ALIAS" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", "models:/landcover/1", "--tracking-uri",
                 f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no MLflow tracking store at" in capsys.readouterr().err
