"""Stage 4: training with Lightning, by concern.

- `tasks/`: what a run learns (a base task owning the optimizer, the schedule and the monitor's lineage;
  segmentation, MAE and DINO);
- `strategies/`: how the ranks share the work (FSDP2, tensor parallel, ZeRO, pipeline), behind one protocol;
- `launch/`: the LightningCLI, the `fit`/`pretrain` commands, the Ray launcher, Slurm requeue;
- `callbacks/`: MLflow monitoring, checkpoints, registration, step timing, profiling;
- `planning/`: memory and traffic of each strategy before a run (`eoscale plan`).

The flat module names of before (`eoscale.train.task`, `.zero`, `.fsdp`, …) stay as re-exports, so configs naming
`eoscale.train.task.SegmentationTask` keep working; each warns once when imported (`eoscale.train.moved`). Imports
stay lazy here: `eoscale --help` must not pay for torch.
"""
