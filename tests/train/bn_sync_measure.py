"""The measurement behind `eoscale.train.strategies.buffers`' choice (not a test; about 5 minutes on 2 cores):
FSDP2 on 2 gloo CPU ranks, eoscale's resnet18 segmentation model: step time and rank agreement of
(none) plain FSDP2, (broadcast) rank 0's BN buffers broadcast before each forward that follows a training one (as DDP),
(lazy) rank 0's BN buffers broadcast once, before evaluating,
(syncbn) SyncBatchNorm semantics (torch's SyncBatchNorm has no CPU kernels: a CPU re-implementation with
its collectives: an all_gather of (mean, var, count) per BN forward, an all_reduce of 2C sums per BN backward).
    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 2 tests/train/bn_sync_measure.py 5
(the argument: rounds of 5 steps a variant, the variants' order reversed every other round)
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from eoscale.models import build_model
from eoscale.train.strategies.fsdp import shard_model


class _SyncBN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, rm, rv, eps, momentum):
        C, dims = x.shape[1], [0, 2, 3]
        n = x.numel() // C
        mean, var = x.mean(dims), x.var(dims, unbiased=False)
        stats = torch.cat([mean, var, torch.tensor([float(n)])])
        parts = [torch.empty_like(stats) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, stats)
        s = torch.stack(parts)
        counts = s[:, -1:]
        N = counts.sum()
        gmean = (s[:, :C] * counts).sum(0) / N
        gvar = ((s[:, C:2 * C] + s[:, :C] ** 2) * counts).sum(0) / N - gmean ** 2
        with torch.no_grad():
            rm.mul_(1 - momentum).add_(momentum * gmean)
            rv.mul_(1 - momentum).add_(momentum * gvar * N / (N - 1))
        invstd = (gvar + eps).rsqrt()
        xhat = (x - gmean[None, :, None, None]) * invstd[None, :, None, None]
        ctx.save_for_backward(xhat, invstd, w, N)
        return xhat * w[None, :, None, None] + b[None, :, None, None]

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, w, N = ctx.saved_tensors
        dims = [0, 2, 3]
        local = torch.cat([dy.sum(dims), (dy * xhat).sum(dims)])
        dw, db = local[dy.shape[1]:].clone(), local[:dy.shape[1]].clone()
        dist.all_reduce(local)
        C = dy.shape[1]
        sdy, sdyx = local[:C], local[C:]
        dx = (w * invstd / N)[None, :, None, None] * (N * dy - sdy[None, :, None, None] - xhat * sdyx[None, :, None, None])
        return dx, dw, db, None, None, None, None


class CPUSyncBN(nn.BatchNorm2d):
    def forward(self, x):
        if not self.training:
            return super().forward(x)
        self.num_batches_tracked.add_(1)
        return _SyncBN.apply(x, self.weight, self.bias, self.running_mean, self.running_var, self.eps, self.momentum)


def to_sync(m):
    for name, child in m.named_children():
        if isinstance(child, nn.BatchNorm2d):
            new = CPUSyncBN(child.num_features, child.eps, child.momentum)
            new.load_state_dict(child.state_dict())
            setattr(m, name, new)
        else:
            to_sync(child)
    return m


def bn_buffers(m):
    return [b for mod in m.modules() if isinstance(mod, nn.modules.batchnorm._BatchNorm) for b in mod.buffers()]


def sync(module):
    bufs = bn_buffers(module)
    for dtype in sorted({b.dtype for b in bufs}, key=str):
        group = [b for b in bufs if b.dtype == dtype]
        flat = torch.cat([b.reshape(-1) for b in group])
        dist.broadcast(flat, 0)
        for b, v in zip(group, flat.split([b.numel() for b in group]), strict=True):
            b.copy_(v.view_as(b))


def broadcast_hook(module, args):
    # as DDP: rank 0's buffers before any forward that follows a training forward
    if getattr(module, "_dirty", True):
        sync(module)
    module._dirty = module.training


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("data_parallel",))
    models = {}
    for variant in ("none", "broadcast", "lazy", "syncbn"):
        torch.manual_seed(0)
        m = build_model("resnet18", in_chans=10, num_classes=4, img_size=64)
        if variant == "syncbn":
            to_sync(m)
        shard_model(m, mesh)
        if variant == "broadcast":
            m.register_forward_pre_hook(broadcast_hook)
        models[variant] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches

    def step(variant):
        m, opt = models[variant]
        m.train()
        x = torch.randn(4, 10, 64, 64, generator=g) * (1 + rank)  # ranks see different statistics
        y = torch.randint(0, 4, (4, 64, 64), generator=g)
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    times = {v: [] for v in models}
    for v in models:  # warm-up
        step(v)
        step(v)
    rounds, steps = int(sys.argv[1]) if len(sys.argv) > 1 else 7, 5
    for r in range(rounds):
        order = list(models) if r % 2 == 0 else list(models)[::-1]  # alternate the sides
        for v in order:
            dist.barrier()
            t = time.perf_counter()
            for _ in range(steps):
                step(v)
            dist.barrier()
            times[v].append((time.perf_counter() - t) / steps)
    probe = torch.randn(2, 10, 64, 64, generator=torch.Generator().manual_seed(0))
    for v, (m, _) in models.items():
        m.eval()
        if v == "lazy":  # once, before the eval forward (the strategy's on_validation_start)
            sync(m)
        with torch.no_grad():
            out = m(probe)
        outs = [torch.empty_like(out) for _ in range(2)]
        dist.all_gather(outs, out)
        bufs = torch.cat([b.float().reshape(-1) for b in bn_buffers(m)])
        gathered = [torch.empty_like(bufs) for _ in range(2)]
        dist.all_gather(gathered, bufs)
        if rank == 0:
            print(f"{v:9s} step median {statistics.median(times[v]) * 1e3:7.1f} ms (rounds: "
                  f"{' '.join(f'{t * 1e3:.0f}' for t in times[v])}); eval outputs rank0-rank1 max "
                  f"{float((outs[0] - outs[1]).abs().max()):.2e}; "
                  f"BN buffers max gap {float((gathered[0] - gathered[1]).abs().max()):.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
