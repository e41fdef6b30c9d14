#!/usr/bin/env python3
"""Writes the slide fuzzer's seeds (tests/fuzz/seeds/slide): tiny
Aperio-style SVS files (tests/slide/slide_synth.py: JPEG tiles, reduced
levels, thumbnail, label and macro; classic and BigTIFF; odd tile sizes and
sizes that are not a multiple of the tile; Pillow's JPEG tiles with their
tables in JPEGTables, and RGB-coded ones, as the GPU's decoder takes them)
and a generic tiled TIFF, each a few KiB. Run with the project's .venv:
    .venv/bin/python tests/fuzz/make_slide_seeds.py"""
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "slide"))
import slide_synth  # noqa: E402

out = HERE / "seeds" / "slide"
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
small = dict(quality=50, label_size=(12, 10), macro_size=(8, 20))
slide_synth.write_svs(str(out / "svs.svs"), height=48, width=64, tile=16, factors=(2, 4), **small)
slide_synth.write_svs(str(out / "bigtiff.svs"), height=32, width=48, tile=16, factors=(4,), bigtiff=True,
                      macro=False, **small)
slide_synth.write_svs(str(out / "uneven.svs"), height=40, width=56, tile=32, factors=(3,), mpp=0, label=False,
                      **small)
slide_synth.write_svs(str(out / "tables.svs"), height=40, width=48, tile=16, factors=(2,), label=False,
                      macro=False, compression="pil-tables", **small)
slide_synth.write_svs(str(out / "rgb.svs"), height=32, width=40, tile=16, factors=(2,), label=False, macro=False,
                      compression="pil-rgb", **small)
slide_synth.write_generic_tiff(str(out / "generic.tif"), height=32, width=48, tile=16)
for p in sorted(out.iterdir()):
    print(p.name, p.stat().st_size)
