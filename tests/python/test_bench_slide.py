"""bench/slide_vs_python, which otherwise runs only on the GPU machine: the
synthetic slide at a tiny size read back by openslide-python (levels, mpp,
pixels against what was rendered, within JPEG's error), the Python
contenders' tissue grid and patch reads, the mask writer and comparison, and
run.py's report on a fabricated result. The network (make_model.py) needs
torch, which the test venv does not have: its parameter count and ONNX export
are not tested here (README.md, "Tests")."""
import json
import math
import pathlib
import sys

import numpy as np
import openslide
import pytest
import tifffile

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "slide_vs_python"
sys.path.insert(0, str(BENCH))
import config  # noqa: E402
import contenders  # noqa: E402
import make_slide  # noqa: E402
import run as sb  # noqa: E402

SIZE = 1280  # not a multiple of the 1024 level-0 pixels a patch reads: the last row and column are partial


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    work = tmp_path_factory.mktemp("slide_vs_python")
    path = work / "slide.svs"
    info = make_slide.write_slide(path, SIZE, seed=3, quality=90, workers=2, log=lambda m: None)
    return path, info, make_slide.Fields(SIZE, 3)


def test_slide_levels_and_properties(slide):
    path, info, _ = slide
    s = openslide.OpenSlide(str(path))
    assert s.properties["openslide.vendor"] == "aperio"
    assert float(s.properties["openslide.mpp-x"]) == pytest.approx(0.25)
    assert float(s.properties["openslide.mpp-y"]) == pytest.approx(0.25)
    assert s.properties["openslide.objective-power"] == "40"
    assert s.level_dimensions == ((SIZE, SIZE), (SIZE // 4, SIZE // 4), (SIZE // 16, SIZE // 16),
                                  (SIZE // 64, SIZE // 64))
    assert [round(d) for d in s.level_downsamples] == [1, 4, 16, 64]
    assert info["levels"] == [list(d) for d in s.level_dimensions]
    # The reduced levels are tiled as level 0 (the thumbnail page is not a level).
    assert s.properties["openslide.level[1].tile-width"] == str(make_slide.TILE)


def test_slide_pixels_are_what_was_rendered(slide):
    path, _, fields = slide
    s = openslide.OpenSlide(str(path))
    # A region across tile edges at level 0, and one at level 1 against the block means of level 0's render.
    y0, x0, n = 200, 130, 300
    got = np.asarray(s.read_region((x0, y0), 0, (n, n)).convert("RGB")).astype(np.int32)
    want, _ = make_slide.render(y0, x0, n, n, fields)
    diff = np.abs(got - want)
    # JPEG keeps the picture and smooths the pixel noise (uniform, +-7): per pixel within the noise,
    # 4 x 4 block means (the noise averaged out) within a grey level or two.
    assert diff.mean() < 5.0 and np.percentile(diff, 99) < 20, (diff.mean(), np.percentile(diff, 99))
    blocks = np.abs(make_slide.reduce(got.astype(np.uint8), 4).astype(np.int32)
                    - make_slide.reduce(want, 4).astype(np.int32))
    assert blocks.mean() < 1.5, blocks.mean()
    got1 = np.asarray(s.read_region((0, 0), 1, (SIZE // 4, SIZE // 4)).convert("RGB")).astype(np.int32)
    want1 = make_slide.reduce(make_slide.render(0, 0, SIZE, SIZE, fields)[0], 4)
    d1 = np.abs(got1 - want1)
    b1 = np.abs(make_slide.reduce(got1.astype(np.uint8), 4).astype(np.int32)
                - make_slide.reduce(want1, 4).astype(np.int32))
    assert d1.mean() < 5.0 and b1.mean() < 1.5, (d1.mean(), b1.mean())


def test_render_is_a_function_of_coordinates(slide):
    _, _, fields = slide
    whole, cls = make_slide.render(500, 260, 256, 512, fields)
    a, ca = make_slide.render(500, 260, 256, 200, fields)
    b, cb = make_slide.render(500, 460, 256, 312, fields)
    assert np.array_equal(whole, np.concatenate([a, b], 1))
    assert np.array_equal(cls, np.concatenate([ca, cb], 1))
    # The classes follow the colours: background is near white, nuclei dark and blue-ish, stroma pink.
    img = whole.astype(np.int32)
    assert img[cls == 0].min(axis=1).mean() > 225 if (cls == 0).any() else True
    if (cls == 2).any():
        nuc = img[cls == 2]
        assert nuc.mean(axis=0)[2] > nuc.mean(axis=0)[1] and nuc.mean() < 130
    if (cls == 1).any():
        st = img[cls == 1].mean(axis=0)
        assert st[0] > st[1] + 40


def test_tissue_share(tmp_path):
    # The field's threshold leaves TISSUE_SHARE of the slide as tissue; the rendered classes agree.
    f = make_slide.Fields(4096, 0)
    inner = f.tissue[: 4096 // make_slide.TISSUE_DS, : 4096 // make_slide.TISSUE_DS]
    assert abs((inner > 0).mean() - make_slide.TISSUE_SHARE) < 0.02
    _, cls = make_slide.render(0, 0, 4096, 4096, f)
    assert abs((cls > 0).mean() - make_slide.TISSUE_SHARE) < 0.05


def test_tissue_grid_and_patch_reads(slide):
    path, _, fields = slide
    r = contenders.OpenSlideReader(path)
    g = contenders.tissue_grid(r)
    half = math.ceil(SIZE / config.LEVEL0_PER_PIXEL)
    n = config.ROI
    assert g["mask_shape"] == [half, half]
    assert g["rows"] == g["cols"] == math.ceil(half / n)
    assert g["level"] == 3 and g["downsample"] == pytest.approx(64)
    # Against the truth: every patch with a tenth of tissue is kept, none without any tissue near it.
    _, cls = make_slide.render(0, 0, g["rows"] * n * 2, g["cols"] * n * 2, fields)
    cls[SIZE:, :] = 0
    cls[:, SIZE:] = 0
    kept = set(map(tuple, g["patches"]))
    for rr in range(g["rows"]):
        for cc in range(g["cols"]):
            share = (cls[rr * 2 * n:(rr + 1) * 2 * n, cc * 2 * n:(cc + 1) * 2 * n] > 0).mean()
            if share > 0.1:
                assert (rr, cc) in kept, (rr, cc, share)
            if share == 0:
                assert (rr, cc) not in kept, (rr, cc)
    # A partial patch: level 0 read as 1024^2 and halved by 2 x 2 means; past the slide's edge white.
    ps = contenders.PatchSet("torch_openslide", path, [(0, 1)])
    img, i = ps[0]
    assert i == 0 and img.shape == (n, n, 3) and img.dtype == np.uint8
    inside = SIZE // 2 - n  # columns of the patch inside the slide
    want = make_slide.reduce(make_slide.render(0, 2 * n, 2 * n, 2 * inside, fields)[0], 2)
    diff = np.abs(img[:, :inside].astype(np.int32) - want)
    assert diff.mean() < 2.5, diff.mean()
    assert (img[:, inside:] == 255).all()


def test_mask_writer_and_compare(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, (1300, 1100), dtype=np.uint8)
    b = a.copy()
    b[:100, :] = (b[:100, :] + 1) % 3  # 100 rows differ
    pa, pb = tmp_path / "a.tif", tmp_path / "b.tif"
    contenders.write_mask(pa, a, 0.5)
    contenders.write_mask(pb, b, 0.5)
    with tifffile.TiffFile(str(pa)) as tf:
        p = tf.pages[0]
        assert np.array_equal(p.asarray(), a)
        assert p.is_tiled and p.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
        assert p.tags["XResolution"].value == (20000, 1) and p.tags["ResolutionUnit"].value == 3
        subs = [s.asarray() for s in p.pages]
        assert [s.shape for s in subs] == [(325, 275)]
        assert np.array_equal(subs[0], a[::4, ::4])
    c = sb.compare(pa, pb, 3)
    assert c["agreement"] == pytest.approx(1 - 100 * 1100 / a.size)
    for k in range(3):
        ma, mb = a == k, b == k
        assert c["dice"][str(k)] == pytest.approx(2 * (ma & mb).sum() / (ma.sum() + mb.sum()))
    # Inside patches only: patch (1, 1) starts at row 512, below the differing rows.
    c2 = sb.compare(pa, pb, 3, patches=[(1, 1)])
    assert c2["agreement"] == 1.0 and c2["pixels_compared"] == 512 * 512
    assert c2["agreement_all"] == c["agreement"]


def fabricate(work, segrt_error=None):
    paths = config.Paths(work)
    (work / "model").mkdir(parents=True)
    paths.slide_json.write_text(json.dumps({"size": 50000, "mpp": 0.25, "bytes": 2**30, "tissue_share_field": 0.6}))
    paths.model_json.write_text(json.dumps({"parameters": 24_436_000, "classes": 3, "roi": 512, "mpp": 0.5,
                                            "overlap": 0.0}))
    rng = np.random.default_rng(1)
    mask = rng.integers(0, 3, (1024, 1024), dtype=np.uint8)
    other = mask.copy()
    other[0, :512] = (other[0, :512] + 1) % 3
    for c, m in (("torch_openslide", mask), ("segrt", other)):
        paths.out_dir(c).mkdir(parents=True)
        contenders.write_mask(paths.mask_file(c), m, 0.5)
    np.save(paths.patches_file("torch_openslide"), np.array([[0, 0], [1, 1]], np.int32))
    runs = [{"wall_s": w, "parts_s": {"load": 1.0, "infer": w - 1}, "patches": 1500} for w in (30.0, 20.0, 25.0)]
    paths.worker_json("torch_openslide").write_text(json.dumps({"runs": runs, "first_run": runs[0]}))
    seg = {"runs": [{"wall_s": w, "parts_s": {"process": w}} for w in (0.5, 0.7, 0.6)]}
    if segrt_error:
        seg = {"runs": [], "error": segrt_error}
    paths.worker_json("segrt").write_text(json.dumps(seg))
    mem = {"torch_openslide": {"host_pss_bytes": 6 * 2**30, "device_bytes": 3 * 2**30},
           "segrt": {"host_pss_bytes": 2**30, "device_bytes": 2**30}}
    return paths, mem


class Args:
    device, runs, warmup, batch, loader_workers = "cpu", 3, 1, 16, 8


def test_report_on_a_fabricated_result(tmp_path):
    paths, mem = fabricate(tmp_path)
    res = sb.build_report(Args, paths, ["torch_openslide", "torch_cucim", "segrt"], mem)
    t = res["contenders"]["torch_openslide"]
    assert t["summary"]["median_s"] == 25.0 and t["patches_per_s"] == pytest.approx(60.0)
    s = res["contenders"]["segrt"]
    # segrt does not count its patches: the reference's count, said so.
    assert s["patches_per_s"] == pytest.approx(2500.0) and s["patches_counted_by"] == "torch_openslide"
    assert s["targets_met"] == {"patches_per_s": True, "host_bytes": True}
    assert res["contenders"]["torch_cucim"] == {"error": "not run"}
    sp = res["speedups"]["segrt_vs_torch_openslide"]
    assert sp["speedup"] == pytest.approx(25.0 / 0.6) and sp["target_met"]
    # 512 differing pixels in row 0, all inside patch (0, 0); patches (0, 0) and (1, 1) compared.
    cmp_ = res["comparisons"]["segrt_vs_torch_openslide"]
    assert cmp_["pixels_compared"] == 2 * 512 * 512
    assert sp["agreement"] == pytest.approx(1 - 512 / (2 * 512 * 512))
    text = sb.table(res)
    assert "| torch_openslide | 25.00 | 20.00-30.00 | 1500 | 60 | 6.00 | 3.00 |" in text
    assert "| torch_cucim | failed: not run |" in text
    assert "41.67x ok" in text
    assert ">= 2000 patches/s ok; host <= 4 GiB ok" in text


def test_report_with_segrt_failing(tmp_path):
    paths, mem = fabricate(tmp_path, segrt_error="RuntimeError: exit 2: segrt run ...\nsegrt: unknown option --tissue")
    res = sb.build_report(Args, paths, ["torch_openslide", "segrt"], mem)
    assert res["speedups"] == {} and res["comparisons"] == {}
    text = sb.table(res)
    assert "| segrt | failed: RuntimeError: exit 2: segrt run ... / segrt: unknown option --tissue |" in text
    assert "| torch_openslide | 25.00 |" in text


def test_segrt_command(tmp_path):
    paths = config.Paths(tmp_path)
    argv = config.segrt_command("/x/segrt", paths, "cuda", "fp16", 16)
    assert argv[:6] == ["/x/segrt", "run", str(paths.onnx), str(paths.slide), "-o", str(paths.mask_file("segrt"))]
    s = " ".join(argv)
    assert "--mpp 0.5 --sw-batch 16 --tissue otsu" in s and s.endswith("--precision fp16")
    assert "--quiet" not in argv  # its summary lines are parsed
    assert "--precision" not in config.segrt_command("/x/segrt", paths, "cpu", "fp16", 16)
    md = config.onnx_metadata()
    assert md == {"segrt.roi": "512,512", "segrt.overlap": "0", "segrt.mpp": "0.5", "segrt.input.scale": "0.00392156862745098",
                  "segrt.input.mean": "0.485,0.456,0.406", "segrt.input.std": "0.229,0.224,0.225"}


def test_segrt_summary_parsed():
    # The lines segrt run prints without --quiet (as main's CLI printed them for the 4,096^2 slide).
    text = ("segrt: slide.svs: level 0 (4096 x 4096), shrunk by area, windows over 2048 x 2048 px at 0.5 um/px\n"
            "segrt: slide.svs 1x3x2048x2048 -> mask.tif uint8 1x1x2048x2048: 16 windows (16 a run), cpu fp32, "
            "6.598 s\n"
            "segrt: time: loading the model 0.229 s, reading the image 0.534 s, engines 0.085 s, preprocessing "
            "0.000 s, windows 6.598 s, labels back 0.000 s, writing 0.148 s\n")
    windows, parts = contenders.parse_segrt_summary(text)
    assert windows == 16
    assert parts == {"loading_the_model": 0.229, "reading_the_image": 0.534, "engines": 0.085, "preprocessing": 0.0,
                     "windows": 6.598, "labels_back": 0.0, "writing": 0.148}
    assert contenders.parse_segrt_summary("segrt: error: unknown option --tissue") == (None, {})


def test_memory_watch_sees_a_child_process():
    # run.py's Watch over a process tree: a parent that starts a child which fills 300 MB and holds it.
    import subprocess
    code = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "\"import time, numpy as np; a = np.ones(300 * 2**20, np.uint8); time.sleep(1.5)\"])")
    p = subprocess.Popen([sys.executable, "-c", code])
    w = sb.Watch(p.pid, "cpu")
    p.wait()
    peak = w.finish()
    assert peak["processes"] >= 2
    assert 300 * 2**20 <= peak["host_pss_bytes"] <= peak["host_rss_bytes"] < 600 * 2**20, peak
    assert peak["device_bytes"] is None
