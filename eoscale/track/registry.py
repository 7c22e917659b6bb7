"""The MLflow Model Registry for eoscale checkpoints: register one (with its adapters and band contract), and
resolve `models:/NAME/VERSION` or `models:/NAME@ALIAS` to a checkpoint file that `predict` and `serve` read.

    version = register_checkpoint("best.ckpt", name="landcover", run_id=run, tracking_uri=uri, alias="champion")
    path = resolve_checkpoint("models:/landcover@champion", tracking_uri=uri)    # .../model.ckpt

A registered version's source is a folder of the training run's artifacts, `registered_checkpoint/`:
`model.ckpt` (the checkpoint as fit wrote it), `adapters/NAME/` (each LoRA adapter of the fit, where
`eoscale predict --adapter NAME` looks for them: beside the checkpoint) and `contract.json` (the band contract,
also in the version's tags). Resolving reads the tracking store and nothing else: a SQLite store's artifacts
are local files and are used where they are; any other artifact store is read once into
`~/.cache/eoscale/models/NAME/VERSION`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from eoscale.errors import InputError, InputNotFoundError
from eoscale.track.store import client_policy, default_tracking_uri, sqlite_path

PREFIX = "models:/"
ARTIFACT_PATH = "registered_checkpoint"
CHECKPOINT_FILE = "model.ckpt"
CONTRACT_FILE = "contract.json"
_REFERENCE = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[A-Za-z0-9_.-]+))$")


def is_registered_model(reference: str) -> bool:
    return str(reference).startswith(PREFIX)


def parse_reference(reference: str) -> tuple[str, str | None, str | None]:
    """(name, version, alias) of `models:/NAME/VERSION` or `models:/NAME@ALIAS`."""
    match = _REFERENCE.match(reference)
    if not match:
        raise InputError(f"{reference!r} is not a registered model: give models:/NAME/VERSION or models:/NAME@ALIAS")
    return match["name"], match["version"], match["alias"]


def _client(tracking_uri: str | None):
    uri = tracking_uri or default_tracking_uri()
    if uri.startswith("sqlite:") and not sqlite_path(uri).is_file():
        raise InputNotFoundError(f"no MLflow tracking store at {str(sqlite_path(uri))!r}: give --tracking-uri "
                                 "(the store 'eoscale fit' registered the model in)")
    client_policy(uri)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri), uri


def resolve_checkpoint(reference: str, *, tracking_uri: str | None = None) -> Path:
    """The checkpoint file of `reference`: a path as given, or a registered model's `model.ckpt`."""
    if not is_registered_model(reference):
        return Path(reference)
    name, version, alias = parse_reference(reference)
    client, uri = _client(tracking_uri)
    from mlflow.exceptions import MlflowException

    try:
        found = (client.get_model_version(name, version) if version is not None
                 else client.get_model_version_by_alias(name, alias))
    except MlflowException as err:
        try:
            known = sorted(m.name for m in client.search_registered_models())
        except MlflowException:
            known = []
        what = f"version {version}" if version is not None else f"alias @{alias}"
        raise InputNotFoundError(f"no {what} of registered model {name!r} in {uri} "
                                 f"({str(err).splitlines()[0][:120]}; registered models: {', '.join(known) or 'none'})"
                                 ) from None
    folder = _local_folder(found.source, name, found.version)
    checkpoint = folder / CHECKPOINT_FILE
    if not checkpoint.is_file():
        raise InputNotFoundError(f"{reference} (version {found.version}) has no {CHECKPOINT_FILE} at {found.source}: "
                                 "it was not registered by eoscale")
    return checkpoint


def _local_folder(source: str, name: str, version: str) -> Path:
    if source.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(source).path))
    if source.startswith("/"):
        return Path(source)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "eoscale" / "models" / name / str(version)
    if not (cache / CHECKPOINT_FILE).is_file():
        import mlflow.artifacts

        cache.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache.parent))
        mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(staged))
        inner = next((p.parent for p in staged.rglob(CHECKPOINT_FILE)), staged)
        os.replace(inner, cache)
        shutil.rmtree(staged, ignore_errors=True)
    return cache


def register_checkpoint(checkpoint: str | Path, *, name: str, run_id: str, tracking_uri: str,
                        adapters_root: str | Path | None = None, alias: str | None = None) -> str:
    """Log `checkpoint` (with the adapters under `adapters_root/adapters` and its band contract) as run
    `run_id`'s `registered_checkpoint` artifacts and register them as a new version of model `name`
    (created if new), `alias` pointing at it if given; returns the version."""
    from mlflow.exceptions import MlflowException

    from eoscale.contract import read_contract

    contract = read_contract(checkpoint)
    client, _ = _client(tracking_uri)
    with tempfile.TemporaryDirectory(prefix="eoscale-register-") as tmp:
        staged = Path(tmp) / ARTIFACT_PATH
        staged.mkdir()
        shutil.copy2(checkpoint, staged / CHECKPOINT_FILE)
        adapters = Path(adapters_root) / "adapters" if adapters_root else None
        if adapters is not None and adapters.is_dir():
            shutil.copytree(adapters, staged / "adapters")
        (staged / CONTRACT_FILE).write_text(json.dumps(contract.to_dict(), indent=2) + "\n")
        client.log_artifacts(run_id, str(staged), ARTIFACT_PATH)
    source = f"{client.get_run(run_id).info.artifact_uri.rstrip('/')}/{ARTIFACT_PATH}"
    try:
        client.create_registered_model(name)
    except MlflowException as err:
        if getattr(err, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
            raise
    tags = {"eoscale.bands": ",".join(contract.bands), "eoscale.tile_size": str(contract.tile_size),
            "eoscale.classes": ",".join(str(c["code"]) for c in contract.classes)}
    version = client.create_model_version(name, source, run_id=run_id, tags=tags,
                                          description=f"eoscale checkpoint {Path(checkpoint).name}")
    if alias:
        client.set_registered_model_alias(name, alias, version.version)
    return str(version.version)
