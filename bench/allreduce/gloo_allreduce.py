# SPDX-License-Identifier: MIT
# bench/allreduce/gloo_allreduce.py: one rank of PyTorch gloo's allreduce, for comparison (see run).
import glob
import sys
import time

import torch
import torch.distributed as dist


def iters_for(nbytes):
    return max(2, min(100, (32 << 20) // nbytes))


def run_delay():
    """Seconds this rank's threads have waited on a run queue (schedstat's run_delay)."""
    t = 0
    for f in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(f) as fh:
                t += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return t * 1e-9


def main():
    store_file, rank, world, minb, maxb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(1)
    store = dist.FileStore(store_file, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    buf = torch.zeros(maxb // 4, dtype=torch.float32)
    b = minb
    while b <= maxb:
        t = buf[: b // 4]
        iters = iters_for(b)
        dist.all_reduce(t)  # warm up
        best = 1e30
        cpu = time.process_time()  # CLOCK_PROCESS_CPUTIME_ID: every thread of this rank
        wait = run_delay()
        # The machine is shared: the best of 5 timed loops, each timed by its slowest rank.
        for _ in range(5):
            dist.barrier()
            t0 = time.monotonic()
            for _ in range(iters):
                dist.all_reduce(t)
            dt = torch.tensor([(time.monotonic() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            best = min(best, dt.item())
        # CPU and run-queue wait per call of all ranks together, as bench_allreduce.c measures.
        per = torch.tensor([time.process_time() - cpu, run_delay() - wait],
                           dtype=torch.float64) / (5 * iters)
        dist.all_reduce(per)
        if rank == 0:
            print(b, iters, "%.9f" % best, "%.9f %.9f" % tuple(per.tolist()), flush=True)
        b *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
