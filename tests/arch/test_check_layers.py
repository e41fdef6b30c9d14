"""The architecture test's own test: on small made-up trees it passes what
the layers allow and names each include that crosses them."""
import pathlib
import subprocess
import sys

CHECK = pathlib.Path(__file__).resolve().parent / "check_layers.py"


def tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)


def test_allowed_includes_pass(tmp_path):
    r = tree(tmp_path, {
        "include/segrt.h": "",
        "src/core/mem.h": '#include "segrt.h"\n',
        "src/graph/ir.h": '#include "core/mem.h"\n',
        "src/backend/backend.h": '#include "graph/ir.h"\n',
        "src/backend/cpu/cpu.c": '#include "backend/backend.h"\n#include "cpu.h"\n#include <dnnl.h>\n',
        "src/backend/cuda/k.cu": '#include <cuda_runtime.h>\n#include <stdio.h>\n',
        "src/backend/cpu/cpu.h": "",
        "src/engine/engine.c": '#include "backend/backend.h"\n',
        "src/pipeline/job.c": '#include "engine/engine.c"\n#include "io/npy.h"\n',
        "src/io/npy.h": '#include "core/mem.h"\n',
        "src/io/shim.cc": '#include "io/npy.h"\n#include <gdcmReader.h>\n',
        "src/io/nii.c": '#include <nifti2_io.h>\n',
        "tools/segrt.c": '#include "segrt.h"\n#include "cli.h"\n',
        "tools/cli.h": "",
        "python/segrt/_segrt.c": '#include "segrt.h"\n#include <Python.h>\n#include <dlpack/dlpack.h>\n',
    })
    assert r.returncode == 0, r.stdout


def test_each_crossing_is_named(tmp_path):
    r = tree(tmp_path, {
        "include/segrt.h": "",
        "src/core/mem.h": "",
        "src/graph/ir.h": '#include "core/mem.h"\n',
        "src/io/npy.h": "\n\n#include \"graph/ir.h\"\n",
        "src/backend/cuda/k.c": '#include "backend/cpu/cpu.h"\n',
        "src/backend/cpu/cpu.h": "",
        "src/engine/engine.c": '#include "pipeline/job.h"\n',
        "src/pipeline/job.h": "",
        "tools/segrt.c": '#include "core/mem.h"\n',
        "src/core/bad.c": '#include "missing.h"\n',
        "src/engine/dev.c": '#include <stdlib.h>\n#include <cuda_runtime.h>\n',
        "src/pipeline/cpu.c": '#include <dnnl.h>\n',
        "python/segrt/_segrt.c": '#include "segrt.h"\n#include "engine/engine_internal.h"\n#include <cuda_runtime.h>\n',
        "src/engine/engine_internal.h": "",
        "src/io/shim.cc": '#include "engine/engine.h"\n',
        "src/engine/engine.h": "",
        "src/pipeline/vol.c": '#include <gdcmReader.h>\n',
    })
    assert r.returncode == 1
    lines = set(r.stdout.splitlines())
    assert "src/io/npy.h:3: io may not include src/graph/ir.h (graph)" in lines
    assert "src/backend/cuda/k.c:1: backend/cuda may not include src/backend/cpu/cpu.h (backend/cpu)" in lines
    assert "src/engine/engine.c:1: engine may not include src/pipeline/job.h (pipeline)" in lines
    assert "tools/segrt.c:1: tools may not include src/core/mem.h (core)" in lines
    assert 'src/core/bad.c: includes "missing.h", which is not a file of the tree' in lines
    assert "src/engine/dev.c:2: engine may not include <cuda_runtime.h> (only backend/cuda uses that library)" in lines
    assert "src/pipeline/cpu.c:1: pipeline may not include <dnnl.h> (only backend/cpu uses that library)" in lines
    assert "python/segrt/_segrt.c:2: python may not include src/engine/engine_internal.h (engine)" in lines
    assert "python/segrt/_segrt.c:3: python may not include <cuda_runtime.h> (only backend/cuda uses that library)" in lines
    assert "src/io/shim.cc:1: io may not include src/engine/engine.h (engine)" in lines
    assert "src/pipeline/vol.c:1: pipeline may not include <gdcmReader.h> (only io uses that library)" in lines
    assert "11 include(s)" in r.stdout
