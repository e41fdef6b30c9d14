"""Writes the seed corpus of fuzz_engine (tests/fuzz/seeds/engine/): small
ONNX models that exercise many operators on the CPU plan.

Two cases of every operator family of the differential tests
(tests/python/opgen.py: each a pure function of its seed), and a few small
networks with symbolic dims (which fuzz_engine binds to 1 to 4) built here.
Each file stays a few KB so that mutations stay fast.

    .venv/bin/python tests/fuzz/make_engine_seeds.py [OUT_DIR]
"""
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
import opgen  # noqa: E402

MAX_BYTES = 16 << 10


def out_info(name, rank):
    """An output of `rank` dims, each its own symbol (the graph computes them)."""
    return helper.make_tensor_value_info(name, TP.FLOAT, [f"{name}{d}" for d in range(rank)])


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def save(path, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="segrt-fuzz")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def unet_block(out, rng):
    """Conv, InstanceNorm, LeakyReLU, MaxPool, ConvTranspose, Concat and a
    1x1 Conv with Softmax over N x 2 x H x W, N, H and W symbolic."""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("InstanceNormalization", ["c1", "s1", "t1"], ["n1"], epsilon=1e-5),
        helper.make_node("LeakyRelu", ["n1"], ["a1"], alpha=0.1),
        helper.make_node("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["a2"]),
        helper.make_node("ConvTranspose", ["a2", "w3"], ["u"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Shape", ["a1"], ["shp"]),
        helper.make_node("Gather", ["shp", "idx23"], ["hw"], axis=0),
        helper.make_node("Slice", ["u", "zero2", "hw", "axes23"], ["us"]),
        helper.make_node("Concat", ["a1", "us"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w4", "b4"], ["logits"], kernel_shape=[1, 1]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [init("w1", w(4, 2, 3, 3)), init("b1", w(4)), init("s1", np.ones(4, np.float32)),
             init("t1", np.zeros(4, np.float32)), init("w2", w(4, 4, 3, 3)), init("w3", w(4, 4, 2, 2)),
             init("zero2", np.zeros(2, np.int64)), init("axes23", np.array([2, 3], np.int64)),
             init("idx23", np.array([2, 3], np.int64)), init("w4", w(2, 8, 1, 1)), init("b4", w(2))]
    save(out / "net-unet2d.onnx", nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 2, "h", "w"])],
         [out_info("y", 4)], inits)


def resize_conv(out, rng):
    """Resize by scales, then a Conv: the shape of issue 36's SIGFPE, at a
    small scale the fuzzer can grow."""
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear"),
        helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    inits = [init("scales", np.array([1, 1, 2, 2], np.float32)),
             init("w", (rng.standard_normal((3, 1, 3, 3)) * 0.3).astype(np.float32))]
    save(out / "net-resize-conv.onnx", nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [1, 1, "h", "w"])],
         [out_info("y", 4)], inits)


def conv3d_norm(out, rng):
    """A 3-D Conv with GroupNorm, PReLU and a residual Add (fused on the CPU)."""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3, 3], pads=[1] * 6),
        helper.make_node("PRelu", ["c1", "slope"], ["a1"]),
        helper.make_node("Add", ["a1", "c1"], ["r1"]),
        helper.make_node("GroupNormalization", ["r1", "gs", "gb"], ["y"], num_groups=2, epsilon=1e-5),
    ]
    inits = [init("w1", w(4, 1, 3, 3, 3)), init("slope", np.full((4, 1, 1, 1), 0.2, np.float32)),
             init("gs", np.ones(4, np.float32)), init("gb", np.zeros(4, np.float32))]
    save(out / "net-conv3d-norm.onnx", nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 1, "d", 3, "w"])],
         [out_info("y", 5)], inits, opset=21)


def value_shapes(out):
    """Shapes from input values (the interpreter path): ConstantOfShape and
    Range sized by an int64 input, Expand and Tile by it too, summed to a
    scalar: an output of known shape, so that a run can be asked for."""
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", TP.FLOAT, [1], [1.5])),
        helper.make_node("ReduceMax", ["s"], ["m"], keepdims=0),
        helper.make_node("Range", ["zero", "m", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
        helper.make_node("Expand", ["rf", "s"], ["e"]),
        helper.make_node("Add", ["c", "e"], ["y"]),
        helper.make_node("Tile", ["y", "s"], ["t"]),
        helper.make_node("ReduceSum", ["t"], ["sum"], keepdims=0),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("one", np.array(1, np.int64))]
    save(out / "net-value-shapes.onnx", nodes, [helper.make_tensor_value_info("s", TP.INT64, [2])],
         [helper.make_tensor_value_info("sum", TP.FLOAT, [])], inits)


def edges(out, rng):
    """Single operators with large (but allowed) attributes and constants,
    a mutated digit away from sizes past the limits: dilations and pads,
    a strided ConvTranspose, a 500x Resize, wide Pads, a pool with strides
    past its input, many groups."""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    x = lambda name, shape: helper.make_tensor_value_info(name, TP.FLOAT, shape)  # noqa: E731
    cases = {
        "edge-conv-dilated": ([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], dilations=[300, 2],
                                                pads=[300, 2, 300, 2])],
                              [x("x", [1, 1, 8, 8])], [init("w", w(2, 1, 3, 3))]),
        "edge-conv-transpose-strided": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3],
                                                          strides=[200, 1], output_padding=[7, 0])],
                                        [x("x", [1, 2, 3, 3])], [init("w", w(2, 2, 3, 3))]),
        "edge-resize-500x": ([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")],
                             [x("x", [1, 1, 2, 2])], [init("s", np.array([1, 1, 500, 500], np.float32))]),
        "edge-pad-wide": ([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], [x("x", [1, 1, 3, 3])],
                          [init("p", np.array([0, 0, 500, 500, 0, 0, 499, 499], np.int64))]),
        "edge-pool-strided": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[7, 7], strides=[100, 100],
                                                pads=[3, 3, 3, 3], ceil_mode=1)],
                              [x("x", [1, 1, 16, 16])], []),
        "edge-avgpool-pads": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[5, 5], strides=[1, 1],
                                                pads=[4, 4, 4, 4], count_include_pad=0)],
                              [x("x", [1, 2, 4, 4])], []),
        "edge-conv-groups": ([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=8,
                                               pads=[1, 1, 1, 1], strides=[2, 2])],
                             [x("x", [1, 8, 5, 5])], [init("w", w(8, 1, 3, 3))]),
        "edge-tile-expand": ([helper.make_node("Tile", ["x", "r"], ["t"]),
                              helper.make_node("Expand", ["t", "e"], ["y"])],
                             [x("x", [1, 2, 3])], [init("r", np.array([1, 200, 200], np.int64)),
                                                   init("e", np.array([2, 1, 1, 1], np.int64))]),
    }
    for name, (nodes, inputs, inits) in cases.items():
        save(out / f"{name}.onnx", nodes, inputs, [out_info("y", 4)], inits, opset=18)


def if_shape(out):
    """An If on the input's height with an If inside a branch
    (tests/python/test_if.py's model): fuzz_engine's bound dims take
    either branch."""
    import test_if
    onnx.save(test_if.shape_model(), str(out / "net-if-shape.onnx"))


def sdpa_op(out, rng):
    """segrt's own ScaledDotProductAttention (domain ai.segrt), K given
    transposed, a constant mask and one fed, both broadcast."""
    vi = lambda n, s: helper.make_tensor_value_info(n, TP.FLOAT, s)  # noqa: E731
    node = helper.make_node("ScaledDotProductAttention", ["q", "k", "v", "m0", "m1"], ["y"], domain="ai.segrt",
                            k_transposed=1, scale=0.4)
    g = helper.make_graph([node], "g", [vi("q", [2, 3, 5, 4]), vi("k", [2, 3, 4, 6]), vi("v", [2, 3, 6, 2]),
                                        vi("m1", [2, 1, 5, 6])], [vi("y", None)],
                          initializer=[init("m0", rng.standard_normal((3, 1, 6)).astype(np.float32))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.segrt", 1)],
                          producer_name="segrt-fuzz")
    m.ir_version = 8
    onnx.save(m, str(out / "sdpa-op.onnx"))


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "seeds" / "engine"
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*.onnx"):
        f.unlink()
    rng = np.random.default_rng(36)
    unet_block(out, rng)
    resize_conv(out, rng)
    conv3d_norm(out, rng)
    value_shapes(out)
    edges(out, rng)
    if_shape(out)
    sdpa_op(out, rng)
    kept = 4 + 8 + 1 + 1
    for name, fam in sorted(opgen.FAMILIES.items()):
        if fam.gen is None:
            continue
        for i in range(2):
            seed = opgen.family_base(name) + i
            case = opgen.make_case(name, seed)
            data = case.model.SerializeToString()
            if len(data) > MAX_BYTES:
                continue
            (out / f"{name}-{seed}.onnx").write_bytes(data)
            kept += 1
    print(f"{kept} seeds in {out}")


if __name__ == "__main__":
    main()
