"""Compiles beside a benchmark loop: threads of the timing process against
processes beside it. One timing process of a cold start compiles ahead
in threads (DETD_COMPILE_AHEAD) while it benchmarks; this measures what
each side does to the other, with Triton's own compiler and benchmarker:

    python3 tests/gpu/run_compile_threads.py [--kernels 24] [--workers 8] [--rounds 5]

For each way of compiling (in order in one thread; in --workers threads
of this process, 10 nice levels down; in --workers processes beside it,
started and warm before the clock, 10 nice levels down, as
DETD_COMPILE_NICE does) it compiles --kernels
distinct kernels (fresh TRITON_CACHE_DIR each time) and prints the
compile wall time, and what the loop beside them measured against the
same loop alone. On a GPU the loop is triton.testing.do_bench (warmup 25
ms, rep 100 ms, Triton's defaults) of a small and a large elementwise
kernel, repeated while the compiles run: the median of its medians over
the median alone (1.00x: the compiles did not move the measurement).
Without a GPU (a check of the script; the compiles target sm90) the loop
is pure Python, the interpreter lock's worst case, and the figure is its
iteration rate against alone.
"""

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_one(j, target):
    """Compile kernel number j (its own constexprs: a cache miss) for
    target (backend, arch, warp size)."""
    import triton
    from compile_kernel import SIGNATURE, chain
    src = triton.compiler.ASTSource(fn=chain, signature=SIGNATURE, constexprs={"BLOCK": 128 << (j % 4), "S": 24 + j})
    triton.compile(src, target=triton.backends.compiler.GPUTarget(*target))
    return j


def _worker_init(cache):
    sys.path.insert(0, HERE)
    os.environ["TRITON_CACHE_DIR"] = cache
    os.nice(10)


def _thread_nice():
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + 10)


def _noop(_=None):
    return os.getpid()


def fresh_cache():
    """A new, empty TRITON_CACHE_DIR for this process (and a pool started
    after it): every compile a miss."""
    os.environ["TRITON_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="detd-ct-")
    return cache


def start_pool(how, workers, cache):
    """For 'processes': a spawned pool on ``cache``, its workers started and
    importing before the clock; None otherwise."""
    if how != "processes":
        return None
    pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                                  initargs=(cache,))
    list(pool.map(_noop, range(workers * 4)))
    return pool


def target_of(gpu):
    import triton
    if gpu:
        t = triton.runtime.driver.active.get_current_target()
        return (t.backend, t.arch, t.warp_size)
    return ("cuda", 90, 32)


class Loop:
    """The loop beside the compiles: do_bench of two kernels on a GPU, a
    pure-Python counter without one. run(stop) returns its figure."""

    def __init__(self, gpu):
        self.gpu = gpu
        if gpu:
            import torch
            import triton
            from compile_kernel import chain
            from triton.testing import do_bench
            self.do_bench = do_bench
            self.cases = []
            for n, block in ((4096, 128), (1 << 24, 1024)):
                x = torch.randn(n, device="cuda")
                y = torch.empty_like(x)
                grid = (triton.cdiv(n, block),)
                self.cases.append(lambda x=x, y=y, n=n, block=block, grid=grid:
                                  chain[grid](x, y, n, BLOCK=block, S=4))
                self.cases[-1]()
            torch.cuda.synchronize()

    def run(self, stop, rounds):
        """GPU: per kernel, the median do_bench median over the rounds
        taken (at least one, then until stop is set and rounds are done).
        CPU: iterations per second until stop."""
        if not self.gpu:
            n, t0 = 0, time.perf_counter()
            while not stop.is_set():
                n += 1
            return [n / (time.perf_counter() - t0)]
        got = [[] for _ in self.cases]
        while True:
            for k, fn in enumerate(self.cases):
                got[k].append(self.do_bench(fn, warmup=25, rep=100))
            if stop.is_set() and len(got[0]) >= rounds:
                return [statistics.median(g) for g in got]


def compile_all(how, kernels, workers, target, pool):
    """Compile every kernel: 'one thread' (in order), 'threads' (10 nice
    levels down, as DETD_COMPILE_NICE does) or 'processes' (pool).
    Returns the wall seconds."""
    t0 = time.perf_counter()
    if how == "threads":
        with cf.ThreadPoolExecutor(workers, initializer=_thread_nice) as ex:
            list(ex.map(lambda j: compile_one(j, target), range(kernels)))
    elif how == "processes":
        list(pool.map(compile_one, range(kernels), [target] * kernels))
    else:
        for j in range(kernels):
            compile_one(j, target)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=24)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5, help="do_bench rounds at least, per figure (GPU)")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import triton
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    target = target_of(gpu)
    loop = Loop(gpu)
    stop = threading.Event()

    def loop_alone():
        """The loop's figure with nothing beside it: the GPU's rounds, or
        the CPU loop's rate over one second."""
        stop.clear()
        threading.Timer(0.0 if gpu else 1.0, stop.set).start()
        return loop.run(stop, a.rounds)

    alone = loop_alone()
    rows = []
    for how in ("one thread", "threads", "processes"):
        # The compiles alone, then the same number again in a fresh cache
        # (and a fresh pool on it) with the loop beside them.
        pool = start_pool(how, a.workers, fresh_cache())
        wall_alone = compile_all(how, a.kernels, a.workers, target, pool)
        if pool is not None:
            pool.shutdown()
        pool = start_pool(how, a.workers, fresh_cache())
        stop.clear()
        out = {}
        side = threading.Thread(target=lambda: out.update(wall=compile_all(how, a.kernels, a.workers, target, pool)))
        res = {}
        bench = threading.Thread(target=lambda: res.update(fig=loop.run(stop, a.rounds)))
        bench.start()
        side.start()
        side.join()
        stop.set()
        bench.join()
        if pool is not None:
            pool.shutdown()
        rows.append((how, wall_alone, out["wall"], [f / b for f, b in zip(res["fig"], alone)]))
    dev = torch.cuda.get_device_name() if gpu else f"no GPU (compiles for {target[0]} sm{target[1]})"
    print(f"\n== {a.kernels} compiles, {a.workers} workers, {os.cpu_count()} cores, {dev}, Triton "
          f"{triton.__version__} ==")
    what = ("do_bench median beside / alone (4096 and 16M elements)" if gpu
            else "pure-Python loop rate beside / alone")
    print(f"| compiles | wall alone s | wall beside the loop s | {what} |")
    print("|---|---|---|---|")
    for how, wa, wb, r in rows:
        print(f"| {how} | {wa:.2f} | {wb:.2f} | {' / '.join(f'{x:.3f}x' for x in r)} |")
    if gpu:
        print("do_bench alone, before / after (ms): "
              + ", ".join(f"{b:.4f} / {c:.4f}" for b, c in zip(alone, loop_alone())))


if __name__ == "__main__":
    main()
