#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/agent/tutorial_cases.py CASE: the ways PyTorch's public tutorials and docs teach a
worker to meet its peers, one per CASE, written for tests/agent/tutorials.sh (which runs each
under crun and under torchrun and compares them). Each prints a few deterministic lines; each
reads RANK and WORLD_SIZE as a launched worker does.

  setup   the DDP tutorial's setup(): MASTER_ADDR/MASTER_PORT set by the program itself
          (port from $TUTORIAL_PORT), init_process_group("gloo"), one DDP step
  tcp     init_process_group(init_method="tcp://127.0.0.1:$TUTORIAL_PORT")
  file    init_process_group(init_method="file://$TUTORIAL_FILE")
  store   a TCPStore of the program's own at MASTER_ADDR:MASTER_PORT, rank 0 its server
  env     plain env:// init_process_group and a gloo all_reduce
  idle    env:// init_process_group, then idle until $TUTORIAL_STOP exists (60 s at most),
          its pid in $TUTORIAL_READY.<rank> once initialised (for a CPU-time measurement)
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TIMEOUT = datetime.timedelta(seconds=50)


def say(line):
    # One write per line: torchrun's workers share its stdout, and python -u writes print()'s
    # text and its newline separately, so two ranks' lines could interleave.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def all_reduce_line():
    t = torch.tensor([float(RANK + 1)])
    dist.all_reduce(t)
    return "rank %d of %d: sum %d" % (RANK, WORLD, int(t.item()))


def case_setup():
    # The DDP tutorial's setup(rank, world_size), as a launched worker would call it.
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ["TUTORIAL_PORT"]
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD, timeout=TIMEOUT)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(100 + RANK)
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    total = sum(float(p.detach().double().sum()) for p in model.parameters())
    say("rank %d: parameters after one step %.6f" % (RANK, total))
    dist.destroy_process_group()


def case_tcp():
    url = "tcp://127.0.0.1:%s" % os.environ["TUTORIAL_PORT"]
    dist.init_process_group("gloo", init_method=url, rank=RANK, world_size=WORLD,
                            timeout=TIMEOUT)
    say(all_reduce_line())
    dist.destroy_process_group()


def case_file():
    url = "file://" + os.environ["TUTORIAL_FILE"]
    dist.init_process_group("gloo", init_method=url, rank=RANK, world_size=WORLD,
                            timeout=TIMEOUT)
    say(all_reduce_line())
    dist.destroy_process_group()


def case_store():
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD,
                          RANK == 0, TIMEOUT)
    store.set("from/%d" % RANK, "hello from rank %d" % RANK)
    for r in range(WORLD):
        say("rank %d read: %s" % (RANK, store.get("from/%d" % r).decode()))
    # Rank 0 serves the store: it leaves only once every rank has read everything.
    store.add("done", 1)
    if RANK == 0:
        deadline = time.monotonic() + 50
        while store.add("done", 0) < WORLD:
            if time.monotonic() > deadline:
                sys.exit("rank 0: the other ranks never finished")
            time.sleep(0.05)


def case_env():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    say(all_reduce_line())
    dist.destroy_process_group()


def case_idle():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    ready = "%s.%d" % (os.environ["TUTORIAL_READY"], RANK)
    with open(ready + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(ready + ".tmp", ready)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["TUTORIAL_STOP"]):
        if time.monotonic() > deadline:
            sys.exit("idle: no stop file in 60 s")
        time.sleep(0.2)
    say(all_reduce_line())
    dist.destroy_process_group()


CASES = {"setup": case_setup, "tcp": case_tcp, "file": case_file, "store": case_store,
         "env": case_env, "idle": case_idle}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit("usage: tutorial_cases.py %s" % "|".join(CASES))
    CASES[sys.argv[1]]()
