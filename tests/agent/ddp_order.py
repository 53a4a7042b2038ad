# SPDX-License-Identifier: MIT
# tests/agent/ddp_order.py: a small ordinary PyTorch gloo DDP program (nothing crun-specific)
# for tests/agent/startorder.sh. It prints the bootstrap variables it was given, so the test can
# check that every node handed its workers the same ones, then trains a few steps and prints a
# digest of the parameters. init_process_group waits at most 60 s (torch's default is 30 min),
# so a job whose nodes disagree fails within the test's time. train_digest is imported by
# tests/agent/tsgen_worker.py too (one copy).
import datetime
import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train_digest(rank):
    """Train a few gloo DDP steps (the process group is up) and return the SHA-256 of the
    parameters, printed to 9 significant digits: equal on every rank when DDP kept them equal."""
    torch.manual_seed(1234)
    model = torch.nn.Linear(4, 1)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        x = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True)).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    text = " ".join("%.9e" % v for v in flat.tolist())
    return hashlib.sha256(text.encode()).hexdigest()


def main():
    for k in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"):
        print("%s=%s" % (k, os.environ.get(k, "")), flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    print("params=%s" % train_digest(dist.get_rank()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
