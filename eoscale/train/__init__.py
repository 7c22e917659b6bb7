"""Stage 4: training with Lightning — the segmentation task, the CLI, FSDP2, checkpoints, MLflow.

Imports stay lazy here: `eoscale --help` must not pay for torch.
"""
