# Sourced by a benchmark's carry.sh (bench/volume_vs_monai, bench/slide_vs_python)
# with `here` set to its folder: the Python wheels the GPU machine lacks, in
# sets (a, b) that each go with one call of the device tool, whose 64 MiB
# must also hold the tracked tree and, with set b, segrt's archive
# (scripts/gpu-carry.sh). Wheels go to $here/.carry/SET, and install into
# $here/.env/site (PYTHONPATH there).

# carry_download SET WHEEL...: the wheels for the GPU machine's Python 3.12.
carry_download() {
    local set=$1; shift
    local dir=$here/.carry/$set
    rm -rf "$dir" && mkdir -p "$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
        --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -d "$dir" "$@"
}

# carry_sizes: the sets, and what each call carries against the 64 MiB.
carry_sizes() {
    ls -l "$here/.carry/a" "$here/.carry/b"
    local root tree seg set w extra total
    root=$(cd "$here/../.." && pwd)
    tree=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
    seg=$(stat -c %s "$root/.carry/segrt-carry.tar.xz" 2>/dev/null || echo 0)
    for set in a b; do
        w=$(cat "$here/.carry/$set"/*.whl | wc -c)
        extra=0
        [ "$set" = b ] && extra=$seg
        total=$((tree + w + extra))
        echo "call $set: tree $tree + wheels $w$([ $set = b ] && echo " + segrt $seg") = $total bytes" \
             "($((total * 100 / 67108864)) % of 64 MiB)"
    done
    [ "$seg" -gt 0 ] || echo "(no .carry/segrt-carry.tar.xz yet: add its size to call b)"
}

# carry_install SET: on the GPU machine, set SET into $here/.env/site.
carry_install() {
    local set=${1:?install a or b}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$here/.env/site" "$here/.carry/$set"/*.whl
    echo "carry: set $set installed into $here/.env/site"
}
