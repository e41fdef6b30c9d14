#!/usr/bin/env bash
# `make install` works for a user: installs into a fresh prefix, then builds a
# program against the installed header through pkg-config, links the shared
# library by its SONAME and runs it on a test model.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR MODELS_DIR (the generated test models)
set -euo pipefail
build=$1 src=$2 models=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(find "$prefix" -name libsegrt.so -printf '%h\n' | head -n 1)
for f in "$prefix/include/segrt.h" "$prefix/bin/segrt" "$libdir/libsegrt.a" "$libdir/pkgconfig/segrt.pc"; do
    [[ -e $f ]] || { echo "missing $f"; exit 1; }
done
soname=$(readelf -d "$libdir/libsegrt.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[[ $soname == libsegrt.so.0 ]] || { echo "SONAME is '$soname'"; exit 1; }
# Only the public API is exported from the shared library.
if nm -D --defined-only "$libdir/libsegrt.so" | awk '{print $3}' | grep -v '^segrt_' | grep -v '^_' | grep .; then
    echo "symbols other than segrt_* are exported"; exit 1
fi
cat >"$prefix/user.c" <<'C'
#include <segrt.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    segrt_model *m;
    if (argc < 2 || segrt_model_load(argv[1], &m) != SEGRT_OK) {
        fprintf(stderr, "%s\n", segrt_last_error());
        return 1;
    }
    printf("segrt %s: %zu input(s), %zu node(s)\n", segrt_version(), segrt_model_input_count(m),
           segrt_model_node_count(m));
    segrt_model_destroy(m);
    return 0;
}
C
export PKG_CONFIG_PATH=$libdir/pkgconfig
# SEGRT_USER_CFLAGS: the sanitizer build's library needs a sanitized program.
cc -std=c11 -Wall -Werror ${SEGRT_USER_CFLAGS:-} "$prefix/user.c" -o "$prefix/user" $(pkg-config --cflags --libs segrt)
LD_LIBRARY_PATH=$libdir "$prefix/user" "$models/basicunet2d_tiny.onnx"
"$prefix/bin/segrt" --version >/dev/null
echo "install: 1 passed, 0 failed"
