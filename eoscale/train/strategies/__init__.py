"""How the ranks share the work: DDP (Lightning's), FSDP2, tensor parallelism × FSDP2, DeepSpeed ZeRO, pipeline stages.

Tasks and the data loader talk to a strategy only through `eoscale.train.strategies.protocol` (the data-parallel
group, gradient clipping, preparing the model, the full state for export), never by its attribute names.
`consolidate` turns the sharded checkpoint folders some of them write into one file.
"""
