"""No leak over 10,000 calls: the inputs' reference counts come back,
Python's traced memory and the process's resident memory stay bounded,
through the buffer path, the DLPack path, out= and failing calls."""
import gc
import sys
import tracemalloc

import numpy as np

import segrt
from conftest import SANITIZED
from test_dlpack import OnlyDLPack

CALLS = 10_000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_no_leak_over_10000_calls(tiny):
    with segrt.Engine(tiny, threads=1) as e:
        x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
        want = np.maximum(2 * x + 1, 0)
        out = np.zeros_like(x)
        bad = x.astype(np.float64)
        for _ in range(200):  # warm: contexts, plans, caches
            e(x)
            e(OnlyDLPack(x))
        refs = [sys.getrefcount(v) for v in (x, out, bad)]
        gc.collect()
        rss0 = rss_bytes()
        tracemalloc.start()
        snap0 = tracemalloc.take_snapshot()
        for i in range(CALLS):
            y = e(x)
            if i % 4 == 1:
                y = e(OnlyDLPack(x))
            elif i % 4 == 2:
                y = e(x, out=out)
            elif i % 4 == 3:
                y = e.run({"x": x})["y"]
                try:
                    e(bad)
                except segrt.InvalidArgumentError:
                    pass
            assert y[0, 0] == want[0, 0]
        del y
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(snap0, "filename"))
        tracemalloc.stop()
        assert [sys.getrefcount(v) for v in (x, out, bad)] == refs
        assert np.array_equal(e(x), want) and np.array_equal(out, want)
        assert grown < 256 * 1024, f"Python memory grew by {grown} bytes over {CALLS} calls"
        # Under ASan its quarantine of freed blocks (16 MiB, tests/CMakeLists.txt) counts too.
        bound = (48 if SANITIZED else 32) << 20
        assert rss_bytes() - rss0 < bound, f"resident memory grew by {rss_bytes() - rss0} bytes"
