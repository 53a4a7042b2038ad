# SPDX-License-Identifier: MIT
# tests/agent/ddp_train.py: an ordinary PyTorch DDP script (nothing crun-specific): gloo,
# init_process_group from the environment torchrun would set. Writes its final parameters.
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)  # every rank sees different data
    for _ in range(20):
        x = torch.randn(32, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    with open(os.path.join(out_dir, "params.%d" % rank), "w") as f:
        f.write(" ".join("%.9e" % v for v in flat.tolist()) + "\n")
    print("rank %d of %d done, loss %.4f" % (rank, dist.get_world_size(), loss.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
