"""Threads: 4 threads x 50 calls on one engine, each result bit-identical
to a single call; contexts are made for concurrent callers only, and
Engine.pool(n) bounds them while the results stay the same."""
import threading

import numpy as np
import pytest

import segrt
from conftest import SANITIZED, tiny_input

CALLS = 20 if SANITIZED else 50


@pytest.mark.parametrize("pool", [None, 2])
def test_four_threads_bit_identical(models, pool):
    xs = [tiny_input(30 + t, (1, 1, 32, 32)) for t in range(4)]
    with segrt.Engine(models / "basicunet2d_tiny.onnx", threads=1) as e:
        want = [e(x) for x in xs]
        if pool:
            e.pool(pool)
        bad, errors = [], []
        start = threading.Barrier(4)

        def work(t):
            try:
                start.wait()
                for i in range(CALLS):
                    y = e(xs[t]) if i % 2 else e.run({"image": xs[t]})["logits"]
                    if not np.array_equal(y, want[t]):
                        bad.append((t, i))
            except BaseException as ex:  # reported below
                errors.append(ex)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors and not bad
        made, idle, limit = e._c._contexts()
        assert made == idle and 1 <= made <= (pool or 4) and limit == (pool or 0)


def test_close_waits_for_runs_in_progress(models):
    e = segrt.Engine(models / "basicunet2d_tiny.onnx", threads=1)
    x = tiny_input(40, (1, 1, 64, 64))
    want = e(x)
    results, started = [], threading.Event()

    def work():
        started.set()
        for _ in range(5):
            try:
                results.append(np.array_equal(e(x), want))
            except ValueError:  # closed: later calls are refused, never crash
                results.append("closed")

    th = threading.Thread(target=work)
    th.start()
    started.wait()
    e.close()
    th.join()
    assert results and all(r is True or r == "closed" for r in results)
    assert e.closed
