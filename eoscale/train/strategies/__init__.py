"""How the ranks share the work: DDP (Lightning's), FSDP2, tensor parallelism × FSDP2, DeepSpeed ZeRO, pipeline stages.

Tasks and the data loader talk to a strategy only through `eoscale.train.strategies.protocol` (the data-parallel
group, gradient clipping, preparing the model, the full state for export, equal buffers on every replica), never
by its attribute names. `buffers` keeps BatchNorm's running statistics rank 0's on every rank under the strategies
that hold a copy on each and do not align them (FSDP2, FSDP2 × tensor parallelism, DeepSpeed ZeRO).
`consolidate` turns the sharded checkpoint folders some of them write into one file.
"""
