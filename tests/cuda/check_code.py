"""That libsegrt holds the CUDA code of every architecture it is built for.

usage: check_code.py LIBSEGRT CODE TRANSLATION_UNITS

CODE is CMake's SEGRT_CUDA_CODE (sm_75,sm_80,...,sm_90a,...,compute_120):
each sm_XY must be machine code (an ELF cubin) of every CUDA translation
unit, each compute_XY PTX of every one, and nothing else may be there.
Read with cuobjdump (the nvidia-cuda-cuobjdump wheel of the test
requirements, or the CUDA toolkit's); a missing cuobjdump fails the test,
as the check would otherwise pass unseen."""
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig


def cuobjdump():
    for base in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for path in sorted(glob.glob(os.path.join(base, "nvidia", "*", "bin", "cuobjdump"))):
            if not os.access(path, os.X_OK):
                os.chmod(path, 0o755)  # a wheel may drop the mode bits
            return path
    for path in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if path and os.access(path, os.X_OK):
            return path
    sys.exit("check_code: no cuobjdump (pip install nvidia-cuda-cuobjdump, in tests/requirements.txt)")


def listed(tool, lib, what):
    """Counter of architectures (sm_90a, sm_120...) of lib's `what` (elf, ptx) files."""
    p = subprocess.run([tool, f"--list-{what}", lib], capture_output=True, text=True)
    text = p.stdout + p.stderr
    if p.returncode != 0 and "No " not in text:
        sys.exit(f"check_code: cuobjdump --list-{what} {lib} failed: {text.strip()}")
    ext = "cubin" if what == "elf" else "ptx"
    return collections.Counter(re.findall(rf"\.(sm_\d+a?)\.{ext}\b", text))


def main():
    lib, code, units = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    tool = cuobjdump()
    want_elf = collections.Counter({c: units for c in code if c.startswith("sm_")})
    want_ptx = collections.Counter({"sm_" + c[len("compute_"):]: units for c in code if c.startswith("compute_")})
    elf, ptx = listed(tool, lib, "elf"), listed(tool, lib, "ptx")
    problems = []
    for kind, got, want in (("machine code", elf, want_elf), ("PTX", ptx, want_ptx)):
        for arch in sorted(set(got) | set(want)):
            if got[arch] != want[arch]:
                problems.append(f"{kind} {arch}: {got[arch]} translation units, expected {want[arch]}")
    print(f"{lib}: machine code {dict(elf)}, PTX {dict(ptx)} ({units} CUDA translation units)")
    if problems:
        sys.exit("check_code: " + "; ".join(problems))


if __name__ == "__main__":
    main()
