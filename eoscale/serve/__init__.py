"""Serving: an eoscale checkpoint and its LoRA adapters behind Triton Inference Server (`eoscale serve`).

`server` is the recipe (PyTriton: bind, start, wait for a signal, stop), `landcover` one served model (tensors,
band contract, the batched callable), the fix that lets PyTriton 0.7.0's backend run under numpy 2 is `eoscale._compat.pytriton`.
The client side, `eoscale predict --server`, is `eoscale.infer.remote`.
"""
