"""Inference: a checkpoint's land-cover maps of whole scenes, blended over sliding windows, out of core.

The modules, in the order a scene goes through them: `model` (checkpoint → network and band contract),
`windows` (the window grid), `predict` (the window loop), `blend` (weights and the row accumulator),
`outputs` (the output writer of each target kind, `eoscale.contract.TARGET_KINDS`: the class COG, quick-look and
`areas`' area table of a class model; part files and COGs), `run` (the recipe over scenes and processes),
`distributed` (ranks, spawning, waiting), `summary` and `tracking` (console and MLflow), `evaluate`
(accuracy on a tile store's split), `config` (every option of a run, no torch), `command` (`eoscale predict`).

    from eoscale.infer.config import PredictConfig
    from eoscale.infer.run import predict
    result = predict(PredictConfig(checkpoint="best.ckpt", inputs=["scene.tif"], output="maps"))
"""
