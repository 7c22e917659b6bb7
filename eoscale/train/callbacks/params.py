"""What a training run logs as MLflow params: one namespaced set that reads well in MLflow's UI.

- `model` / `data` (the classes) and `model.*` / `data.*` (their arguments, as the resolved config gives them);
- `trainer.*`, `checkpoint.*`, `monitor.*`, `steptime.*`, `profile.*`: only what differs from the default
  (the whole resolved config is the run's `config.yaml` artifact);
- `seed_everything`, `ckpt_path`;
- `run/*` from the training monitor (`eoscale.train.callbacks.monitor.run_facts`): strategy, world size, nodes,
  devices, precision, launcher, global batch, store fingerprint, Slurm job, … and `data/bands`,
  `data/tile_size`, `data/classes` from the band contract.

Nothing twice (Lightning's own copy of the model's and datamodule's hparams is turned off by `EoscaleCLI`), and
no LightningCLI internals (`_instantiator`, `_class_path`, `class_path`/`init_args` nesting, the logger).
"""

from __future__ import annotations

import json
from typing import Any

ALWAYS = ("model", "data")  # every argument logged, default or not: they say what was trained on what
INTERNAL = ("config", "trainer.logger")  # the config files' paths (in config.yaml), the MLflow logger itself


def flatten(dumped: str) -> dict[str, Any]:
    """A dumped (JSON) config as `a.b.c` keys; `x.class_path` becomes `x`, `x.init_args.y` becomes `x.y`."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):  # callbacks: one key each
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            out[prefix] = value

    walk("", json.loads(dumped))
    tidy = {}
    for key, value in out.items():
        key = key.replace(".init_args.", ".").removeprefix("init_args.")
        key = key.removesuffix(".class_path") if key.endswith(".class_path") else key
        tidy[key] = value
    return tidy


def config_params(dumped: str, defaults: str | None) -> dict[str, Any]:
    """The params of a resolved config (`dumped`), given the parser's defaults (both dumped as JSON)."""
    params = flatten(dumped)
    base = flatten(defaults) if defaults else {}
    keep = {}
    for key, value in params.items():
        head = key.split(".", 1)[0]
        if key.rsplit(".", 1)[-1].startswith("_") or any(key == i or key.startswith(i + ".") for i in INTERNAL):
            continue  # LightningCLI's `_instantiator`, `_class_path`, `__path__`
        if head not in ALWAYS and "." in key and key in base and base[key] == value:
            continue  # a trainer or callback option left at its default
        keep[key] = value
    return keep


def description(facts: dict[str, Any], store: str | None = None) -> str:
    """One paragraph for the run's page in MLflow's UI (the `mlflow.note.content` tag)."""
    model = facts.get("run/backbone") or facts.get("run/model") or "a model"
    devices = facts.get("run/world_size", 1)
    nodes = facts.get("run/num_nodes", 1)
    per_node = facts.get("run/devices_per_node", devices)
    text = (f"{facts.get('run/model', 'training')} ({model}) on {store or 'a tile store'}: "
            f"{facts.get('run/strategy', '?')}, {nodes} node(s) × {per_node} device(s) = {devices} rank(s), "
            f"precision {facts.get('run/precision', '?')}, global batch {facts.get('run/global_batch_size', '?')}, "
            f"launched by {facts.get('run/launcher', '?')}")
    if facts.get("run/slurm_job_id"):
        text += f", Slurm job {facts['run/slurm_job_id']}"
    return text + (". Where the time goes: the steptime/* metrics; compare runs with 'eoscale compare'.")
