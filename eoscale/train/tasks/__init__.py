"""What a run learns: `BaseTask` (the hooks, the optimizer and its schedule, the monitor's lineage) and the
tasks built on it: `SegmentationTask` (land-cover classes), `RegressionTask` (per-pixel values, `regression`),
`MAETask` and `DINOTask` (self-supervised pretraining of a ViT), `TemporalSegmentationTask` and
`TemporalMAETask` (a season: segmentation, and MAE pretraining of the temporal ViT with tubes masked). Each lives in its own module; importing this package imports none of them (torch is slow to import).
"""
