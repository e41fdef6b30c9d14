"""Sliding windows on the GPU (src/pipeline/sw_device.h): gathered,
blended and finished on the device (the CUDA backend's window ops).

- Every case of tests/python/test_sliding_window.py (2-D and 3-D, odd
  sizes, images smaller than the window, both blends, paddings, grids,
  output kinds, mirroring, ensembles) through `segrt run --device cuda
  --precision fp32` against the numpy MONAI reference run by onnxruntime.
- The same cases with `--accumulate whole` (accumulators for the whole
  image) and `--host-blend` (the host path): the slab ring gives exactly
  the whole-image numbers, and the host path the same within rounding.
- A memory budget with room for strips of axis 1 (shared sums on the
  device, or in pinned host memory): the whole-image run's numbers to
  rounding; one too small for a strip forces passes over thin slabs
  (windows run once per slab they touch): bit-identical to it.
- The C API with a device image and a device result.
- A window session repeats its job bit for bit, over images of other
  sizes in between, keeping its buffers, and never reuses a result it
  handed out.
- A host image taller than its ring of uploaded rows (uploads ahead of the
  windows, the ring wrapping, a second image, passes under a budget):
  bit-identical to the same run over a device image, with the run's host
  time reported.
- Engines built for a range of batches: the job's short batch runs at
  its own size (one more plan, compiled once), with the fixed-batch
  engines' numbers, and first (a network that mixes its batch shows it).
- The issue's bounded-memory job: a random 100-class network over a
  384x384x256 volume with a 128^3 window at overlap 0.5, labels, under a
  2 GiB budget, against the whole-image run.
- float16 and bfloat16 accumulators (--accumulator): within a bound
  derived from their rounding of float32's numbers, labels changed only
  at near-ties, and the ring's memory halved.
"""
import dataclasses
import os
import re

import numpy as np
import pytest
from onnx import helper

import segrt_capi as sc
import sw_reference as ref
from conftest import run_segrt
from gpu_util import report
from onnx_util import init, save_model, tensor_input
from test_sliding_window import CASES, SW, TTA_CASES, make_convnet, reference_result

TOL = 1e-4  # fp32 on cuDNN (TF32 off) against onnxruntime: relative to max(1, max |ref|)
SUMMARY = re.compile(r"blended on the GPU in (\d+) pass(?:es)?, device memory ([\d.]+) MiB "
                     r"\(networks ([\d.]+) \+ windows ([\d.]+)\)")


def models_for(tmp_path, case: SW):
    nd = len(case.spatial)
    return [make_convnet(tmp_path / f"model{m}.onnx", nd, case.c, case.k, seed=case.seed + 1000 * m)
            for m in range(case.models)]


def image_for(case: SW):
    rng = np.random.default_rng(1000 + case.seed)
    return rng.standard_normal((case.n, case.c) + tuple(case.spatial)).astype(np.float32)


def run_gpu(tmp_path, case: SW, models, image, *extra, tag="gpu"):
    img_path, out_path = tmp_path / f"image-{tag}.npy", tmp_path / f"out-{tag}.npy"
    np.save(img_path, image)
    others = [a for m in models[1:] for a in ("--model", m)]
    p = run_segrt("run", models[0], "--input", img_path, "--output", out_path, "--device", "cuda",
                  "--precision", "fp32", "--autotune", "0", "--workspace", "64M", "--no-cache", *case.args(),
                  *others, *extra, check=0, timeout=300)
    return np.load(out_path), p


def summary(p):
    m = SUMMARY.search(p.stdout)
    assert m, f"no GPU summary line in: {p.stdout!r}"
    return {"passes": int(m.group(1)), "mib": float(m.group(2)), "networks_mib": float(m.group(3)),
            "windows_mib": float(m.group(4))}


def check_against_reference(case, got, models, image):
    want, logits, thr = reference_result(case, image, models)
    assert got.shape == want.shape and got.dtype == want.dtype, f"{got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    if case.kind in ("logits", "probs"):
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got.astype(np.float64) - want).max())
        assert err <= TOL * scale, f"max abs diff {err:.3g} (scale {scale:.3g})"
    else:
        ties = ref.ambiguous_labels(logits, case.activation, thr, TOL)
        bad = (got != want) & ~ties
        assert not bad.any(), f"{int(bad.sum())} labels differ away from ties; {int(ties.sum())} ties allowed"


ALL = {**CASES, **TTA_CASES}


@pytest.mark.parametrize("name", list(ALL))
def test_device_path_matches_reference(tmp_path, gpu, name):
    case = ALL[name]
    models = models_for(tmp_path, case)
    image = image_for(case)
    got, p = run_gpu(tmp_path, case, models, image)
    s = summary(p)
    assert s["passes"] == 1
    check_against_reference(case, got, models, image)
    whole, p2 = run_gpu(tmp_path, case, models, image, "--accumulate", "whole", tag="whole")
    summary(p2)
    assert np.array_equal(got, whole), "the slab ring and the whole-image accumulators disagree"
    host, p3 = run_gpu(tmp_path, case, models, image, "--host-blend", tag="host")
    assert not SUMMARY.search(p3.stdout), "--host-blend still blended on the GPU"
    if case.kind == "labels":
        assert (got == host).mean() >= 0.999
    else:
        scale = max(1.0, float(np.abs(host).max()))
        assert float(np.abs(got.astype(np.float64) - host).max()) <= TOL * scale


# Budget cases: big enough planes that a few rows of accumulators are
# visible in the summary's MiB.
BUDGET_CASES = {
    "2d-k20-o50-labels": SW((300, 2000), (64, 64), k=20, overlap=0.5, sw_batch=2, blend="gaussian",
                            kind="labels", seed=60),
    "3d-k6-o50-probs": SW((70, 96, 120), (32, 32, 32), k=6, overlap=0.5, sw_batch=2, kind="probs", seed=61),
    "2d-k4-n2-tta-logits": SW((200, 1500), (48, 64), n=2, k=4, overlap=0.25, sw_batch=3, tta="all", seed=62),
}


STRIPS = re.compile(r"(\d+) strips \((?:shared sums: ([\d.]+) MiB of host memory|shared sums on the device)\)")


def strips_of(p):
    """The summary's strips and the MiB of host memory their shared sums took."""
    m = STRIPS.search(p.stdout)
    return (int(m.group(1)), float(m.group(2) or 0)) if m else (1, 0.0)


def budget_sizes(case, sr):
    """The whole-plane ring's MiB (min(roi0, padded0) rows of K+1 float32
    channels) and a one-window-column strip's ring (roi1 columns)."""
    padded = [max(s, r) for s, r in zip(case.spatial, case.roi)]
    rows = min(case.roi[0], padded[0])
    rest = int(np.prod(padded[2:])) if len(padded) > 2 else 1
    ring = (case.k + 1) * rows * int(np.prod(padded[1:])) * 4 / 2 ** 20
    strip1 = (case.k + 1) * rows * case.roi[1] * rest * 4 / 2 ** 20
    return ring, strip1


def assert_close_to_whole(case, got, whole, models, image):
    """Strips add a voxel's windows strip by strip: the numbers of the
    whole-image run to rounding, labels apart from near-ties."""
    assert got.shape == whole.shape and got.dtype == whole.dtype
    if case.kind == "labels":
        _, logits, thr = reference_result(case, image, models)
        ties = ref.ambiguous_labels(logits, case.activation, thr, TOL)
        bad = (got != whole) & ~ties
        assert not bad.any(), f"{int(bad.sum())} labels differ from the whole-image run away from ties"
    else:
        scale = max(1.0, float(np.abs(whole).max()))
        err = float(np.abs(got.astype(np.float64) - whole).max())
        assert err <= 1e-5 * scale, f"max abs diff from the whole-image run {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("name", list(BUDGET_CASES))
def test_budget_takes_strips(tmp_path, gpu, name):
    """A budget with room for a quarter of the whole-plane ring (or two
    window columns' strips): strips of axis 1, every window once, one pass,
    the shared sums on the device where they fit; and one with room for a
    single window column's strip and 20 KiB more (the summary's MiB are
    rounded to 10 KiB; the seams need more): the shared sums wait in pinned
    host memory."""
    case = BUDGET_CASES[name]
    models = models_for(tmp_path, case)
    image = image_for(case)
    whole, pw = run_gpu(tmp_path, case, models, image, "--accumulate", "whole", tag="whole")
    ring, pr = run_gpu(tmp_path, case, models, image, tag="ring")
    sr = summary(pr)
    assert np.array_equal(ring, whole)
    ring_mib, strip1_mib = budget_sizes(case, sr)
    assert strip1_mib * 2.2 < ring_mib, "the case's plane is too narrow for strips"
    # The widest seam: K+1 channels of every padded row over the widest
    # overlap of neighbouring window columns (the last pair's, on MONAI's
    # grid), the rest of the plane.
    padded = [max(x, r) for x, r in zip(case.spatial, case.roi)]
    st1 = ref.monai_starts(padded[1], case.roi[1], case.overlap)
    overlap_cols = max(a + case.roi[1] - b for a, b in zip(st1, st1[1:]))
    seam_mib = (case.k + 1) * padded[0] * overlap_cols * int(np.prod(padded[2:])) * 4 / 2 ** 20
    budgets = [("strips", sr["mib"] - ring_mib + max(ring_mib * 0.25, strip1_mib * 2.2)),
               ("host-seam", sr["mib"] - ring_mib + strip1_mib + 20 / 1024)]
    if strip1_mib * 2.2 + 2 * seam_mib < ring_mib:
        budgets.append(("device-seam", sr["mib"] - ring_mib + strip1_mib * 2.2 + 2 * seam_mib))
    for tag, budget_mib in budgets:
        got, pb = run_gpu(tmp_path, case, models, image, "--max-memory", f"{int(budget_mib * 1024)}K", tag=tag)
        sb = summary(pb)
        n_strips, host_mib = strips_of(pb)
        assert sb["passes"] == 1 and n_strips > 1, f"{tag}: a budget of {budget_mib:.2f} MiB: {pb.stdout}"
        assert sb["mib"] <= budget_mib + 0.01, pb.stdout
        if tag == "host-seam":
            assert host_mib > 0, pb.stdout
        if tag == "device-seam":
            assert host_mib == 0, pb.stdout
        assert_close_to_whole(case, got, whole, models, image)
        report({"test": "sw_budget_strips", "case": name, "tag": tag, "strips": n_strips, "host_seam_mib": host_mib,
                "budget_mib": budget_mib, "held_mib": sb["mib"]})


@pytest.mark.parametrize("name", list(BUDGET_CASES))
def test_budget_forces_passes_same_numbers(tmp_path, gpu, name):
    """A budget too small for one window column's strip but with room for
    a row or more over the whole plane: passes over thin slabs, windows run
    once per slab they touch, bit-identical to the whole-image run."""
    case = BUDGET_CASES[name]
    models = models_for(tmp_path, case)
    image = image_for(case)
    whole, pw = run_gpu(tmp_path, case, models, image, "--accumulate", "whole", tag="whole")
    ring, pr = run_gpu(tmp_path, case, models, image, tag="ring")
    sr = summary(pr)
    ring_mib, strip1_mib = budget_sizes(case, sr)
    rows = min(case.roi[0], max(case.spatial[0], case.roi[0]))
    row_mib = ring_mib / rows
    assert strip1_mib > 1.2 * row_mib, "the case cannot tell strips from passes"
    budget_mib = sr["mib"] - ring_mib + (strip1_mib + row_mib) / 2
    got, pb = run_gpu(tmp_path, case, models, image, "--max-memory", f"{int(budget_mib * 1024)}K", tag="budget")
    sb = summary(pb)
    assert sb["passes"] > 1 and strips_of(pb)[0] == 1, f"a budget of {budget_mib:.1f} MiB: {pb.stdout}"
    assert sb["mib"] <= budget_mib + 0.01
    assert np.array_equal(got, whole), "passes over thin slabs changed the numbers"
    report({"test": "sw_budget", "case": name, "passes": sb["passes"], "budget_mib": budget_mib,
            "held_mib": sb["mib"]})


def test_budget_too_small_is_an_error(tmp_path, gpu):
    case = BUDGET_CASES["2d-k20-o50-labels"]
    models = models_for(tmp_path, case)
    img_path = tmp_path / "image.npy"
    np.save(img_path, image_for(case))
    p = run_segrt("run", models[0], "--input", img_path, "--output", tmp_path / "o.npy", "--device", "cuda",
                  "--workspace", "64M", "--autotune", "0", "--no-cache", *case.args(), "--max-memory", "1M",
                  timeout=120)
    # A budget the job cannot run in is a bad option (exit 2), and the
    # message says what one window needs.
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    m = re.search(r"budget of 1\.0 MiB is less than one window needs: ([\d.]+) MiB", p.stderr)
    assert m and float(m.group(1)) > 1.0, p.stderr
    assert not (tmp_path / "o.npy").exists()


def test_budget_auto_on_a_roomy_device(tmp_path, gpu):
    """--max-memory auto resolves against the device's free memory: on a
    device with room for the job the run is the unbounded one (one strip,
    one pass, the same numbers), and it holds no more than the device had
    free less the room auto leaves (5 % of it, at least 256 MiB)."""
    case = BUDGET_CASES["2d-k20-o50-labels"]
    models = models_for(tmp_path, case)
    image = image_for(case)
    ring, pr = run_gpu(tmp_path, case, models, image, tag="ring")
    got, pa = run_gpu(tmp_path, case, models, image, "--max-memory", "auto", tag="auto")
    sa = summary(pa)
    assert sa["passes"] == 1 and strips_of(pa)[0] == 1, pa.stdout
    assert np.array_equal(got, ring)
    report({"test": "sw_budget_auto", "held_mib": sa["mib"]})


def test_sw_batch_auto(tmp_path, gpu):
    case = SW((90, 70, 60), (32, 32, 32), k=3, overlap=0.5, kind="labels", seed=63)
    models = models_for(tmp_path, case)
    image = image_for(case)
    one, _ = run_gpu(tmp_path, case, models, image, tag="one")
    args = case.args()
    args[args.index("--sw-batch") + 1] = "auto"
    img_path, out_path = tmp_path / "image-auto.npy", tmp_path / "out-auto.npy"
    np.save(img_path, image)
    p = run_segrt("run", models[0], "--input", img_path, "--output", out_path, "--device", "cuda",
                  "--precision", "fp32", "--autotune", "0", "--workspace", "64M", "--no-cache", *args,
                  "--max-memory", "1G", check=0, timeout=300)
    m = re.search(r"\((\d+) a run\)", p.stdout)
    assert m and int(m.group(1)) > 1, p.stdout
    assert summary(p)["mib"] <= 1024
    assert (np.load(out_path) == one).mean() >= 0.999


def test_c_api_device_image_and_result(tmp_path, gpu):
    case = SW((40, 37, 29), (16, 16, 16), c=2, k=3, overlap=0.5, sw_batch=2, blend="gaussian", kind="probs",
              seed=64)
    models = models_for(tmp_path, case)
    image = image_for(case)
    b = sc.BuildOptions(shapes={"x": (case.sw_batch, case.c) + case.roi}, device="cuda", precision="fp32",
                        workspace=64 << 20)
    with sc.Model.load(str(models[0])) as model, sc.Engine.build(model, b) as engine, engine.context() as ctx, \
            sc.DeviceBuffer.from_array(image) as dimg:
        host_opts = sc.WindowOptions(case.roi, overlap=0.5, batch=2, blend="gaussian", output="probs")
        dev_opts = sc.WindowOptions(case.roi, overlap=0.5, batch=2, blend="gaussian", output="probs",
                                    result_memory="device")
        want = host_opts.run(ctx, image)
        with dev_opts.bind(ctx, dimg.tensor(), with_stats=True)() as r:
            assert r.on_device and r.stats["on_device"] == 1
            got = r.numpy()
        assert np.array_equal(got, want), "a device image and result changed the numbers"
        check_against_reference(case, got, models, image)


def test_short_last_batch_at_its_own_size(tmp_path, gpu):
    """With engines built for a range of batches, a short batch (an
    image's 9 windows in batches of 4: its last batch of 1; two images, an
    ensemble of two) runs at its own size, on a plan the engine compiles on
    its first run and keeps, not padded to 4 with repeated windows: each
    engine holds one more plan after the job, none more after a second
    one, and the numbers match the fixed-batch engines' and the
    reference."""
    case = SW((37, 30), (16, 16), n=2, c=2, k=3, overlap=0.25, sw_batch=4, blend="gaussian", kind="probs",
              seed=77, models=2)
    paths = models_for(tmp_path, case)
    image = image_for(case)
    win = (case.c,) + case.roi
    fixed = sc.BuildOptions(shapes={"x": (4,) + win}, device="cuda", precision="fp32", workspace=64 << 20)
    ranged = sc.BuildOptions(ranges={"x": ((1,) + win, (4,) + win, (4,) + win)}, device="cuda", precision="fp32",
                             workspace=64 << 20)
    opts = dict(overlap=0.25, batch=4, blend="gaussian", output="probs")
    loaded = [sc.Model.load(str(m)) for m in paths]
    engines = {k: [sc.Engine.build(m, b) for m in loaded] for k, b in (("fixed", fixed), ("ranged", ranged))}
    ctxs = {k: [e.context() for e in es] for k, es in engines.items()}
    try:
        plans0 = [e.info()["plans"] for e in engines["ranged"]]
        got = {k: sc.WindowOptions(case.roi, **opts).run(c, image) for k, c in ctxs.items()}
        plans1 = [e.info()["plans"] for e in engines["ranged"]]
        again = sc.WindowOptions(case.roi, **opts).run(ctxs["ranged"], image)
        plans2 = [e.info()["plans"] for e in engines["ranged"]]
    finally:
        for x in [c for cs in ctxs.values() for c in cs] + [e for es in engines.values() for e in es] + loaded:
            x.close()
    print(f"\nplans per ranged engine: {plans0} -> {plans1} -> {plans2}")
    assert all(b == a + 1 for a, b in zip(plans0, plans1)) and plans2 == plans1
    assert np.array_equal(again, got["ranged"])
    np.testing.assert_allclose(got["ranged"], got["fixed"], rtol=0, atol=1e-5)
    check_against_reference(case, got["ranged"], paths, image)


def make_batch_mixing_net(path, n_dims, channels, classes, seed):
    """y = h + the batch's mean of h, h = Conv 1x1(x): a window's result
    depends on the windows that ran beside it, so the result shows how
    the job was cut into batches."""
    rng = np.random.default_rng(seed)
    spatial = ["D", "H", "W"][3 - n_dims:]
    w = rng.standard_normal([classes, channels] + [1] * n_dims).astype(np.float32)
    b = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["h"], kernel_shape=[1] * n_dims),
        helper.make_node("ReduceMean", ["h"], ["m"], axes=[0], keepdims=1),
        helper.make_node("Add", ["h", "m"], ["y"]),
    ]
    save_model(path, nodes, [tensor_input("x", ["N", channels] + spatial)],
               [tensor_input("y", ["N", classes] + spatial)], [init("w", w), init("b", b)])
    return path


def reference_in_batches(case, image, model, sizes):
    """The numpy MONAI reference with the network run on the windows (of
    one image) in batches of the given sizes, in order."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    seen = []
    ref.sliding_window(image, case.roi, lambda x: (seen.append(x), np.zeros((len(x), case.k) + x.shape[2:],
                                                                            np.float32))[1],
                       overlap=case.overlap, sw_batch=case.sw_batch, blend=case.blend)
    windows = np.concatenate(seen)
    assert sum(sizes) == len(windows)
    cuts = np.cumsum((0,) + tuple(sizes))
    pred = np.concatenate([sess.run(None, {"x": windows[a:b]})[0] for a, b in zip(cuts[:-1], cuts[1:])])
    at = [0]

    def replay(x):
        at[0] += len(x)
        return pred[at[0] - len(x):at[0]]
    return ref.sliding_window(image, case.roi, replay, overlap=case.overlap, sw_batch=case.sw_batch, blend=case.blend)


def test_short_batch_runs_first(tmp_path, gpu):
    """Where the short batch runs at its own size it goes first, so that
    from a host image the network starts on the few rows its windows read
    while the rest go up: 9 windows in batches of 4 run as 1, 4, 4. A
    network that mixes its batch shows the cut: the result is the
    reference's cut into 1, 4, 4, which differs from 4, 4, 1."""
    case = SW((37, 30), (16, 16), c=2, k=3, overlap=0.25, sw_batch=4, blend="gaussian", kind="logits", seed=78)
    path = make_batch_mixing_net(tmp_path / "mix.onnx", 2, case.c, case.k, seed=case.seed)
    image = image_for(case)
    win = (case.c,) + case.roi
    ranged = sc.BuildOptions(ranges={"x": ((1,) + win, (4,) + win, (4,) + win)}, device="cuda", precision="fp32",
                             workspace=64 << 20)
    model = sc.Model.load(str(path))
    engine = sc.Engine.build(model, ranged)
    ctx = engine.context()
    try:
        got = sc.WindowOptions(case.roi, overlap=0.25, batch=4, blend="gaussian", output="logits").run([ctx], image)
    finally:
        for x in (ctx, engine, model):
            x.close()
    first = reference_in_batches(case, image, path, (1, 4, 4))
    last = reference_in_batches(case, image, path, (4, 4, 1))
    scale = max(1.0, float(np.abs(first).max()))
    apart = float(np.abs(first - last).max())
    err = float(np.abs(got.astype(np.float64) - first).max())
    print(f"\nmax diff from the 1-4-4 reference {err:.3g}; the two cuts differ by {apart:.3g}")
    assert apart > 100 * TOL * scale, "the network does not show the cut"
    assert err <= TOL * scale


@pytest.mark.parametrize("tag,n,models,mirror,max_memory,plane", [
    ("one", 1, 1, None, None, (21, 18)),
    ("n2-ensemble-mirror", 2, 2, 0b101, None, (21, 18)),
    ("passes", 2, 1, None, "budget", (21, 18)),
    # Rows of 4-voxel multiples: whole windows go up 16 bytes at a time,
    # through the ring's wrap.
    ("aligned-n2", 2, 1, None, None, (20, 24)),
])
def test_host_image_ring_matches_device_image(tmp_path, gpu, tag, n, models, mirror, max_memory, plane):
    """A host image taller than the ring of rows it goes up through: the
    rows are uploaded ahead while earlier batches run, the ring wraps, a
    second image (and, under a budget, each pass) starts it afresh. The
    result must be bit-identical to the same run over the image on the
    device (same kernels, same order), and the run reports its host time."""
    case = SW((150,) + plane, (16, 16, 16), n=n, c=2, k=3, overlap=0.5, sw_batch=3, blend="gaussian",
              kind="probs", seed=71, models=models)
    paths = models_for(tmp_path, case)
    image = image_for(case)
    b = sc.BuildOptions(shapes={"x": (case.sw_batch, case.c) + case.roi}, device="cuda", precision="fp32",
                        workspace=64 << 20)
    opts = dict(overlap=0.5, batch=3, blend="gaussian", output="probs", mirroring=mirror)
    loaded = [sc.Model.load(str(m)) for m in paths]
    engines = [sc.Engine.build(m, b) for m in loaded]
    ctxs = [e.context() for e in engines]
    try:
        if max_memory == "budget":
            # Room for the networks, the window buffers, the result and about 8
            # rows of accumulators (a window's 16 without a budget): passes
            # over slabs of the 150 rows. Passes give the same numbers.
            with sc.WindowOptions(case.roi, **opts).bind(ctxs, image, with_stats=True)() as r:
                whole = r.stats
            row = (case.k + 1) * plane[0] * plane[1] * 4
            opts["max_memory"] = whole["context_bytes"] + whole["pipeline_bytes"] - whole["slab_rows"] * row + 8 * row
        with sc.WindowOptions(case.roi, **opts).bind(ctxs, image, with_stats=True)() as r:
            host, st = r.numpy(), r.stats
        with sc.DeviceBuffer.from_array(image) as dimg, \
                sc.WindowOptions(case.roi, **opts).bind(ctxs, dimg.tensor(), with_stats=True)() as r:
            dev = r.numpy()
    finally:
        for x in ctxs + engines + loaded:
            x.close()
    print(f"\n{tag}: {st}")
    assert st["on_device"] == 1
    if max_memory == "budget":
        assert st["passes"] > 1, st
    assert np.array_equal(host, dev), f"{int((host != dev).sum())} values differ between a host and a device image"
    assert st["seconds_run"] > 0 and st["seconds_setup"] > 0, st
    for k in ("seconds_uploading", "seconds_waiting", "seconds_downloading"):
        assert 0 <= st[k] <= st["seconds_run"], (k, st)
    assert st["seconds_uploading"] > 0, "a host image goes up through pinned buffers"


def test_session_reuses_its_buffers(tmp_path, gpu):
    """A window session keeps its last run's streams and buffers for the
    next. Repeating each job, with an image of another size in between,
    must give the numbers of one-shot runs (segrt_window_run, a fresh
    context) bit for bit; so must a budgeted job's session, run after an
    unbounded one on the same context; a device result handed to the
    caller is never taken back for a later run."""
    case = SW((70, 33, 21), (16, 16, 16), c=2, k=3, overlap=0.5, sw_batch=2, blend="gaussian", kind="probs",
              seed=83)
    paths = models_for(tmp_path, case)
    image = image_for(case)
    small = np.ascontiguousarray(image[:, :, :41, :29, :17])
    b = sc.BuildOptions(shapes={"x": (case.sw_batch, case.c) + case.roi}, device="cuda", precision="fp32",
                        workspace=64 << 20)
    jobs = {
        "probs": dict(overlap=0.5, batch=2, blend="gaussian", output="probs"),
        "constant": dict(overlap=0.5, batch=2, blend="constant", output="probs"),
        "sigma": dict(overlap=0.5, batch=2, blend="gaussian", sigma_scale=0.25, output="probs"),
        "labels": dict(overlap=0.25, batch=2, blend="gaussian", output="labels"),
    }
    with sc.Model.load(str(paths[0])) as model, sc.Engine.build(model, b) as engine:
        def fresh(img, **opts):
            with engine.context() as c:
                return sc.WindowOptions(case.roi, **opts).run(c, img)
        with engine.context() as ctx, sc.DeviceBuffer.from_array(image) as dimg:
            for name, opts in jobs.items():
                want, want_small = fresh(image, **opts), fresh(small, **opts)
                with sc.WindowSession(sc.WindowOptions(case.roi, **opts), ctx) as s:
                    sizes = []
                    for img in (image, image, small, image):
                        got, st = s.run(img, with_stats=True)
                        assert st["on_device"] == 1, st
                        if img is image:
                            sizes.append(st["pipeline_bytes"])
                        assert np.array_equal(got, want if img is image else want_small), \
                            f"{name}: a session's run after others"
                    assert len(set(sizes)) == 1, sizes
            # Under a budget after an unbounded session: passes, same numbers.
            with sc.WindowSession(sc.WindowOptions(case.roi, **jobs["probs"]), ctx) as s:
                _, whole = s.run(image, with_stats=True)
            row = (case.k + 1) * 33 * 21 * 4
            budget = whole["context_bytes"] + whole["pipeline_bytes"] - whole["slab_rows"] * row + 6 * row
            want = fresh(image, **jobs["probs"])
            with sc.WindowSession(sc.WindowOptions(case.roi, max_memory=budget, **jobs["probs"]), ctx) as s:
                for _ in range(2):
                    got, st = s.run(image, with_stats=True)
                    assert st["passes"] > 1 and st["pipeline_bytes"] < whole["pipeline_bytes"], st
                    assert np.array_equal(got, want), "a budgeted session's run"
            with sc.WindowSession(sc.WindowOptions(case.roi, result_memory="device", **jobs["probs"]), ctx) as s:
                run = s.bind(dimg.tensor())
                with run() as kept:
                    first = kept.numpy()
                    assert np.array_equal(first, want)
                    for _ in range(2):
                        with run() as r:
                            assert np.array_equal(r.numpy(), want)
                    assert np.array_equal(kept.numpy(), first), "a later run wrote into a result the caller holds"


def make_random_classes_net(path, classes, hidden=8, seed=0):
    """The issue's bounded-memory job's network: 3x3x3 conv to `hidden`,
    LeakyRelu, 1x1x1 conv to `classes`; random weights."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal([hidden, 1, 3, 3, 3]) / np.sqrt(27)).astype(np.float32)
    w2 = rng.standard_normal([classes, hidden, 1, 1, 1]).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], kernel_shape=[3, 3, 3], pads=[1] * 6),
             helper.make_node("LeakyRelu", ["h"], ["r"], alpha=0.01),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], kernel_shape=[1, 1, 1])]
    save_model(path, nodes, [tensor_input("x", ["N", 1, "D", "H", "W"])],
               [tensor_input("y", ["N", classes, "D", "H", "W"])], [init("w1", w1), init("w2", w2), init("b2", b2)])
    return path


@pytest.mark.skipif(os.environ.get("SEGRT_GPU_BIG", "1") == "0", reason="SEGRT_GPU_BIG=0")
@pytest.mark.parametrize("acc", ["fp32", "fp16"])
def test_100_classes_in_2_gib(tmp_path, gpu, acc):
    """The issue's job: labels of a 100-class network over 384x384x256 with
    a 128^3 window at overlap 0.5 in bounded device memory, against the
    whole-image accumulators (15 GB of them). In 2 GiB with float32 sums not
    even one window column's strip fits: passes, the same labels bit for
    bit. In 3 GiB with float16 sums strips of axis 1 fit, each window runs
    once, and the labels agree but for near-ties of the sums' rounding."""
    limit = {"fp32": 2, "fp16": 3}[acc]
    model = make_random_classes_net(tmp_path / "k100.onnx", 100)
    rng = np.random.default_rng(7)
    image = rng.standard_normal((1, 1, 384, 384, 256)).astype(np.float32)
    img_path = tmp_path / "vol.npy"
    np.save(img_path, image)
    common = ["--device", "cuda", "--precision", "fp16", "--workspace", "64M", "--autotune", "0", "--no-cache",
              "--roi", "128,128,128", "--overlap", "0.5", "--output", "labels"]
    runs = {}
    for tag, extra in (("budget", ["--max-memory", f"{limit}G", "--accumulator", acc]),
                       ("whole", ["--accumulate", "whole"])):
        out = tmp_path / f"labels-{tag}.npy"
        p = run_segrt("run", model, "--input", img_path, "-o", out, *common, *extra, check=0, timeout=600)
        runs[tag] = (np.load(out), p)
    (budget, pb), (whole, pw) = runs["budget"], runs["whole"]
    sb, line_b, line_w = summary(pb), pb.stdout.strip(), pw.stdout.strip()
    agree = float((budget == whole).mean())
    report({"test": "sw_100_classes", "acc": acc, "budget": line_b, "whole": line_w, "agreement": agree})
    print(line_b, line_w, f"agreement {agree:.6f}", sep="\n")
    assert budget.shape == (1, 1, 384, 384, 256) and budget.dtype == np.uint8
    assert sb["mib"] <= limit * 1024, line_b
    assert len(np.unique(whole)) > 10  # a many-class result, not a constant
    if acc == "fp32":
        assert sb["passes"] > 1 and strips_of(pb)[0] == 1, line_b
        assert np.array_equal(budget, whole), f"{int((budget != whole).sum())} labels differ"
    else:
        assert sb["passes"] == 1 and strips_of(pb)[0] > 1, line_b
        assert agree >= 0.999, f"{int((budget != whole).sum())} labels differ"


# ---------------------------------------------------------------------------
# Half-size accumulators (--accumulator fp16|bf16, issue 39 item 5) against
# float32 ones, within a bound derived from the rounding, and half the
# ring's memory.

ACC_U = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}  # unit roundoff of round to nearest: 11 and 8 significant bits
ACC_AGREE = {"fp16": 0.999, "bf16": 0.99}  # labels equal to float32's, at least (K = 3)
ACC_CASES = {
    # Starts on multiples of 4 along the last axis: the kernels' 4-wide path.
    "2d-k3-const-labels": SW((150, 208), (32, 32), k=3, overlap=0.5, sw_batch=2, blend="constant", kind="labels",
                             seed=70),
    # Rows of 130 voxels, not whole groups of 4: voxel by voxel.
    "2d-k3-gauss-mirror-probs": SW((97, 130), (32, 48), k=3, overlap=0.5, sw_batch=2, blend="gaussian",
                                   kind="probs", tta="all", seed=71),
    "3d-k3-gauss-labels": SW((40, 45, 48), (16, 16, 16), k=3, overlap=0.5, sw_batch=2, blend="gaussian",
                             kind="labels", seed=72),
    # 40 classes: the kernels' generic class loop. Their top two logits are
    # close so often that the labels' share of agreement is not checked
    # (bf16 changes about 1 % of them, every change at a tie).
    "3d-k40-const-probs": SW((36, 40, 44), (16, 16, 16), k=40, overlap=0.5, sw_batch=2, blend="constant",
                             kind="probs", seed=73),
    "2d-k40-gauss-logits": SW((120, 150), (32, 32), k=40, overlap=0.5, sw_batch=2, blend="gaussian",
                              kind="logits", seed=74),
}


def accumulator_bound(case: SW, models, image, logits, dtype):
    """Per element of the blended logits (N x K x spatial), the most an
    accumulator type `dtype` may move them from float32's `logits`.

    A launch adds its windows to a voxel's sums in float32 and rounds each
    sum once when it stores it, so the class sum S = sum p_i w_i and the
    weight sum W = sum w_i each take at most m roundings, m the windows
    covering the voxel (a bound on the launches that touch it). A rounding
    moves a partial sum by at most u of itself; a partial class sum is at
    most sum |p_i| w_i, a partial weight sum at most W. So S moves by at
    most u m sum |p_i| w_i and W by u m W, and v = S / W by at most
    u m (A + |v|), A = sum |p_i| w_i / W: the blend of |p| (the reference
    with |predictions|; with mirroring or an ensemble, the mean of |p|
    bounds |mean p|). float16 holds values below 2^-14 as multiples of
    2^-24: each such store may also be off by 2^-25, over W. A margin of
    1.25 covers the terms of second order (u m reaches 0.05 for bfloat16
    under 12 windows) and the float32 sums' own rounding."""
    spatial = image.shape[2:]
    nd = len(spatial)
    roi = ref.resolve_roi(case.roi, spatial)
    overlap = tuple(case.overlap) if isinstance(case.overlap, (tuple, list)) else (case.overlap,) * nd
    padded = tuple(max(s, r) for s, r in zip(spatial, roi))
    begin = [max(r - s, 0) // 2 for s, r in zip(spatial, roi)]
    w = ref.importance_map(roi, case.blend, 0.125 if case.sigma_scale is None else case.sigma_scale)
    cover, weight = np.zeros(padded), np.zeros(padded)
    for s in ref.window_starts(padded, roi, overlap, case.grid):
        sl = tuple(slice(a, a + r) for a, r in zip(s, roi))
        cover[sl] += 1
        weight[sl] += w
    crop = tuple(slice(b, b + n) for b, n in zip(begin, spatial))
    cover, weight = cover[crop][None, None], weight[crop][None, None]
    absolute = [lambda x, f=ref.ort_predictor(m): np.abs(f(x)) for m in models]
    a = ref.sliding_window(image, case.roi, absolute, overlap=case.overlap, sw_batch=case.sw_batch, blend=case.blend,
                           sigma_scale=0.125 if case.sigma_scale is None else case.sigma_scale, pad=case.pad,
                           pad_value=case.pad_value, grid=case.grid, tta_axes=case.tta_axes())
    u = ACC_U[dtype]
    bound = u * cover * (a.astype(np.float64) + np.abs(logits.astype(np.float64)))
    if dtype == "fp16":
        bound = bound + cover * 2.0 ** -25 / weight
    return 1.25 * bound


def labels_differ_only_at_ties(got, want, logits, bound):
    """Labels (N x 1 x spatial) may differ where float32's top two logits
    are within twice the bound: each may move by the bound."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    tie = (top2[:, 1] - top2[:, 0] <= 2 * bound.max(axis=1))[:, None]
    bad = (got != want) & ~tie
    assert not bad.any(), f"{int(bad.sum())} labels differ away from ties ({int(tie.sum())} ties)"


@pytest.mark.parametrize("name", list(ACC_CASES))
def test_half_accumulators_within_their_rounding(tmp_path, gpu, name):
    case = ACC_CASES[name]
    models = models_for(tmp_path, case)
    image = image_for(case)
    want, p32 = run_gpu(tmp_path, case, models, image, "--accumulator", "fp32", tag="fp32")
    s32 = summary(p32)
    logits = want
    if case.kind != "logits":
        logits, _ = run_gpu(tmp_path, dataclasses.replace(case, kind="logits"), models, image, tag="fp32-logits")
    # The ring: min(roi0, padded0) rows of K + 1 channels over the padded plane.
    pad_plane = int(np.prod([max(s, r) for s, r in zip(case.spatial[1:], case.roi[1:])]))
    ring_mib = (case.k + 1) * min(case.roi[0], max(case.spatial[0], case.roi[0])) * pad_plane * 4 / 2 ** 20
    for dtype in ("fp16", "bf16"):
        got, p = run_gpu(tmp_path, case, models, image, "--accumulator", dtype, tag=dtype)
        s = summary(p)
        bound = accumulator_bound(case, models, image, logits, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype
        err = np.abs(got.astype(np.float64) - want)
        if case.kind == "logits":
            assert np.isfinite(got).all()
            worst = float((err / bound).max())
            labels_differ_only_at_ties(got.argmax(1)[:, None], want.argmax(1)[:, None], logits, bound)
        elif case.kind == "probs":
            # softmax: a logit change of at most b moves a probability by at
            # most b / 2 (the Jacobian's rows sum to 2 p (1 - p) in absolute value).
            assert np.isfinite(got).all()
            worst = float((err / (0.5 * bound.max(axis=1, keepdims=True))).max())
            labels_differ_only_at_ties(got.argmax(1)[:, None], want.argmax(1)[:, None], logits, bound)
        else:
            agree = float((got == want).mean())
            assert agree >= ACC_AGREE[dtype], f"{dtype}: {agree:.5f} of the labels agree with float32's"
            labels_differ_only_at_ties(got, want, logits, bound)
            worst = 0.0
        assert worst <= 1.0, f"{dtype}: {worst:.3g} times the rounding's bound away from float32"
        saved = s32["mib"] - s["mib"]
        assert abs(saved - ring_mib / 2) <= 0.1 * ring_mib / 2 + 0.02, \
            f"{dtype}: {saved:.2f} MiB less than float32's {s32['mib']:.2f}, want half the ring's {ring_mib:.2f}"
        report({"test": "sw_accumulator", "case": name, "dtype": dtype, "worst_of_bound": worst,
                "max_abs": float(err.max()), "held_mib": s["mib"], "held_mib_fp32": s32["mib"]})
