"""Who starts a run: the LightningCLI (`cli`, `main`), the `fit`/`validate`/`test` and `pretrain` commands, the
launcher options, Ray Train's launcher and worker, and Slurm's requeue on the time limit.
"""
