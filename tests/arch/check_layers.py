#!/usr/bin/env python3
"""The architecture test: reads every `#include "..."` in src/, tools/ and
python/ (C, CUDA and C++ files: .c, .h, .cu, .cuh, .cpp, .cc) and fails
when one crosses the layers that docs/design.md states (and
../shared/DESIGN.md before it). A layer may include its own files and the
layers below it that the table names; nothing else.

    usage: check_layers.py [ROOT]     exit 0 clean, 1 with a line per crossing
"""
import pathlib
import re
import sys

# Which layers each layer may include (its own always). "include" is the
# public header folder; "backend" the one interface (src/backend/*.h).
ALLOWED = {
    "core": {"include"},
    "graph": {"core", "include"},
    "onnx": {"graph", "core", "include"},
    # ref is the CPU reference, the oracle other backends may compare with.
    "backend/ref": {"backend", "graph", "core", "include"},
    "backend/cpu": {"backend", "backend/ref", "graph", "core", "include"},
    "backend/cuda": {"backend", "backend/ref", "graph", "core", "include"},
    "backend": {"graph", "core", "include"},
    "engine": {"backend", "graph", "onnx", "core", "include"},
    "pipeline": {"engine", "io", "backend", "core", "include"},
    "io": {"core", "include"},
    # The command line and the Python extension: the public API and their
    # own files only.
    "tools": {"include"},
    "python": {"include"},
    "include": set(),
}
# Headers the build generates (protoc-c), by the layer that owns them.
GENERATED = {"onnx.pb-c.h": "onnx"}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
# Device libraries' headers belong to the one backend that wraps them: the
# engine and the pipeline reach a device only through the interface.
SYSTEM = re.compile(r'^[ \t]*#[ \t]*include[ \t]+<([^>]+)>', re.M)
LIBRARY_OWNER = [(re.compile(r"^(cuda|cudnn|cublas|cufft|curand|nvjpeg|nvrtc|cooperative_groups|mma)"), "backend/cuda"),
                 (re.compile(r"^(dnnl|oneapi/dnnl)"), "backend/cpu"),
                 # The medical file libraries belong to the readers (src/io).
                 (re.compile(r"^(gdcm|nifti[12]?(_io)?\.h|znzlib)"), "io")]


def layer_of(rel):
    """The layer of a path relative to the root, or None outside them."""
    parts = pathlib.PurePosixPath(rel).parts
    if parts[0] in ("tools", "include", "python"):
        return parts[0]
    if parts[0] != "src" or len(parts) < 3:
        return None
    if parts[1] == "backend":
        return "backend" if len(parts) == 3 else "backend/" + parts[2]
    return parts[1]


def resolve(root, src, name):
    """Where `#include "name"` in src finds its file: beside src, then
    under src/ and include/ (the build's include folders)."""
    for base in (src.parent, root / "src", root / "include"):
        p = (base / name).resolve()
        if p.is_file():
            return p.relative_to(root).as_posix()
    return None


def crossings(root):
    out = []
    files = sorted(p for d in ("src", "tools", "include", "python") for p in (root / d).rglob("*")
                   if p.suffix in (".c", ".h", ".cu", ".cuh", ".cpp", ".cc"))
    for f in files:
        rel = f.relative_to(root).as_posix()
        mine = layer_of(rel)
        if mine is None:
            continue
        text = f.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            target = resolve(root, f, m.group(1))
            if target is None and m.group(1) in GENERATED:
                target, theirs = m.group(1), GENERATED[m.group(1)]
            elif target is None:
                out.append(f"{rel}: includes \"{m.group(1)}\", which is not a file of the tree")
                continue
            else:
                theirs = layer_of(target)
            if theirs is None or theirs == mine or theirs in ALLOWED[mine]:
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line}: {mine} may not include {target} ({theirs})")
        for m in SYSTEM.finditer(text):
            for pattern, owner in LIBRARY_OWNER:
                if pattern.match(m.group(1)) and mine != owner:
                    line = text.count("\n", 0, m.start()) + 1
                    out.append(f"{rel}:{line}: {mine} may not include <{m.group(1)}> (only {owner} uses that library)")
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2]).resolve()
    found = crossings(root)
    for line in found:
        print(line)
    if found:
        print(f"check_layers: {len(found)} include(s) cross the layers of docs/design.md")
        return 1
    print("check_layers: every include keeps to its layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
