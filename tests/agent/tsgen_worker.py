# SPDX-License-Identifier: MIT
# tests/agent/tsgen_worker.py: an ordinary PyTorch program for tests/agent/tsgen.sh: does each
# round (and each restart) of workers meeting through the agent store see a key space of its
# own? Each worker adds 1 to "joined", waits until every rank has, then reads the count: it
# must be WORLD_SIZE, never a previous round's workers' too. Modes:
#   store: TCPStore(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, False) with no prefix, as torch 2.5+
#          workers use it; on attempt 0, rank 1 exits 1 after the count (a restart follows);
#   pg:    the same through init_process_group(env://) and its default store (torch 1.x: a
#          "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>" prefix), then a gloo all_reduce;
#   hold DIR: as store, with no failure; then touch DIR/counted.<rank> and wait (at most 120 s)
#          for DIR/go before exiting;
#   grow DIR: the torch 1.x keys (that prefix, unchanged on a membership change); while the
#          job has fewer than 2 ranks, train until the agent stops this round (a node joins;
#          at most 150 s, then exit 3), touching DIR/running.<rank>; with 2, check the count,
#          train a few gloo DDP steps and print a digest of the parameters.
# Every wait is bounded (torch's default is 30 min).
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=90)


def count_joined(store, rank, world):
    store.add("joined", 1)
    store.set("here/%d" % rank, "1")
    store.wait(["here/%d" % r for r in range(world)], TIMEOUT)
    n = store.add("joined", 0)
    print("joined=%d world=%d" % (n, world), flush=True)
    return n


def main():
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    print("attempt=%d rank=%d" % (attempt, rank), flush=True)
    if mode == "store":
        store = dist.TCPStore(addr, port, world, False, TIMEOUT)
        n = count_joined(store, rank, world)
        if attempt == 0 and rank == 1:
            sys.exit(1)
    elif mode == "hold":
        store = dist.TCPStore(addr, port, world, False, TIMEOUT)
        n = count_joined(store, rank, world)
        open(os.path.join(sys.argv[2], "counted.%d" % rank), "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(sys.argv[2], "go")):
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.05)
    elif mode == "pg":
        dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
        n = count_joined(dist.distributed_c10d._get_default_store(), rank, world)
        t = torch.ones(1)
        dist.all_reduce(t)
        if attempt == 0 and rank == 1:
            sys.exit(1)
        # Torn down before exit, as PyTorch's tutorials do: left to interpreter exit, torch
        # 1.13's gloo threads aborted a worker ("terminate called without an active
        # exception", SIGABRT) in a CI run of 2026-11-27, the agent store having served it.
        dist.destroy_process_group()
    else:
        store = dist.PrefixStore("/worker/attempt_%d" % attempt,
                                 dist.TCPStore(addr, port, world, False, TIMEOUT))
        n = count_joined(store, rank, world)
        if world < 2:
            open(os.path.join(sys.argv[2], "running.%d" % rank), "w").close()
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                time.sleep(0.2)  # "training", until the agent stops this round
            sys.exit(3)
        # ddp_order.py (beside this file: python puts its folder on sys.path) holds the one
        # copy of the training steps and the digest. Imported here, in this mode alone: with
        # it imported at the top, the pg mode's workers aborted at exit in 3 of 19 runs
        # ("terminate called without an active exception": torch 1.13's gloo threads torn
        # down at interpreter exit), against none in 18 before and none in 10 since.
        from ddp_order import train_digest

        dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
        print("params=%s" % train_digest(rank), flush=True)
        dist.destroy_process_group()
    sys.exit(0 if n == world else 2)


if __name__ == "__main__":
    main()
