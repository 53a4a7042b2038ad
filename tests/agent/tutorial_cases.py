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

The training cases (tests/agent/tutorials_train.sh), after the DDP tutorial and torchelastic's
examples: a small model from a fixed seed, gloo, a DistributedSampler over a synthetic dataset,
SGD with momentum, EPOCHS epochs of STEPS steps; each rank prints the sha256 of its final
parameters (float32 bytes, state_dict order), so runs compare bit for bit:
  ddp     train once, no checkpoint
  elastic checkpoint every epoch to $TUTORIAL_CKPT (rank 0 writes, atomically; every rank
          loads), resume from it; on the first attempt (TORCHELASTIC_RESTART_COUNT=0) rank 1
          SIGKILLs itself in the middle of epoch 2
  doomed  as elastic, but rank 1 kills itself on every attempt (the restart budget runs out)
  launch  torch.distributed.launch's style: the local rank from --local-rank/--local_rank in
          argv, else LOCAL_RANK (as PyTorch's docs teach for moving to torchrun); and the
          variables torchrun gives a worker
"""
import argparse
import datetime
import hashlib
import os
import signal
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


EPOCHS = 4
BATCH = 16  # per rank: 256 samples over 2 ranks are 8 steps an epoch, 32 in all
KILL_EPOCH, KILL_STEP = 2, 3


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 10, generator=g)
    y = (x[:, :3].sum(dim=1, keepdim=True) > 0).float()
    return torch.utils.data.TensorDataset(x, y)


def digest(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def save_checkpoint(path, epoch, model, opt):
    # Rank 0 writes, to a temporary name first: a rank killed mid-write leaves the last
    # whole checkpoint in place (torchelastic's imagenet example does the same).
    torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()},
               path + ".tmp")
    os.replace(path + ".tmp", path)


def train(ckpt=None, doomed=False):
    dist.init_process_group("gloo", timeout=TIMEOUT)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first = 0
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["epoch"] + 1
    if ckpt:
        say("rank %d attempt %d: starting at epoch %d" % (RANK, attempt, first))
    say("rank %d attempt %d: %s" % (RANK, attempt, torchrun_env()))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    data = make_data()
    sampler = torch.utils.data.distributed.DistributedSampler(data, seed=7)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    for epoch in range(first, EPOCHS):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            # After this step's all_reduce every rank is past the line printed below.
            if (RANK == 1 and ckpt and (attempt == 0 or doomed) and epoch == KILL_EPOCH and
                    step == KILL_STEP):
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(ddp(x), y).backward()
            opt.step()
        if ckpt:
            if RANK == 0:
                save_checkpoint(ckpt, epoch, model, opt)
            dist.barrier()
            say("rank %d attempt %d: epoch %d checkpointed" % (RANK, attempt, epoch))
    say("rank %d: final parameters sha256 %s" % (RANK, digest(model)))
    dist.destroy_process_group()


def case_ddp():
    train()


def case_elastic():
    train(ckpt=os.environ["TUTORIAL_CKPT"])


def case_doomed():
    train(ckpt=os.environ["TUTORIAL_CKPT"], doomed=True)


def case_launch():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    # torch.distributed.launch passes --local_rank (1.x) or --local-rank (2.x); torchrun
    # passes neither and sets LOCAL_RANK.
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    args = parser.parse_args()
    if args.local_rank is None:
        local_rank, source = int(os.environ["LOCAL_RANK"]), "LOCAL_RANK"
    else:
        local_rank, source = args.local_rank, "argv"
    dist.init_process_group("gloo", timeout=TIMEOUT)
    say("rank %d: local rank %d from %s; %s" % (RANK, local_rank, source, all_reduce_line()))
    say("rank %d: %s" % (RANK, torchrun_env()))
    dist.destroy_process_group()


def torchrun_env():
    """The variables torchrun 1.13 gives a worker (its local_elastic_agent.py): the values of
    those that a launcher decides alike, only the presence of those that name a place (an
    address, a port, a run id, a file) or that the launcher chooses for itself."""
    alike = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
             "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
             "NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS")
    present = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")
    return " ".join(["%s=%s" % (k, os.environ.get(k, "(unset)")) for k in alike] +
                    ["%s %s" % (k, "set" if os.environ.get(k) else "unset") for k in present])


CASES = {"setup": case_setup, "tcp": case_tcp, "file": case_file, "store": case_store,
         "env": case_env, "idle": case_idle, "ddp": case_ddp, "elastic": case_elastic,
         "doomed": case_doomed, "launch": case_launch}

if __name__ == "__main__":
    # launch's --local-rank may come before the case (torch.distributed.launch puts it first).
    NAMES = [a for a in sys.argv[1:] if not a.startswith("--local")]
    if len(NAMES) != 1 or NAMES[0] not in CASES:
        sys.exit("usage: tutorial_cases.py %s" % "|".join(CASES))
    CASES[NAMES[0]]()
