#!/usr/bin/env python3
"""The four networks segrt's tests run, generated from this file: no file
outside the repository is needed.

    python tests/models/make_models.py OUTDIR [--force]

writes NAME.onnx, NAME.in.npy and NAME.out.npy for each of

  basicunet2d       MONAI BasicUNet(2, 3, 2), as PyTorch's dynamo exporter
                    writes it (opset 20)
  basicunet2d_ts    the same network and weights, as the TorchScript exporter
                    writes it (opset 17), with its shape arithmetic before
                    each Pad and an Identity per deduplicated parameter
  basicunet2d_tiny  BasicUNet(2, 1, 2, features=(8, 8, 16, 32, 64, 8)), dynamo
  unet3d_spleen     MONAI UNet(3, 1, 2, channels=(16, 32, 64, 128, 256),
                    strides=(2, 2, 2, 2), num_res_units=2, norm="batch"),
                    dynamo, BatchNorm folded into the convolutions

Each graph has the nodes, attributes, wiring, initializer shapes and sharing,
input and output names, symbolic dims, value_info, opset and IR version of
the PyTorch 2.11 export of the same MONAI network (the exporters' debug
annotations, node metadata, are left out). Weights are drawn as PyTorch
initialises them: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for convolution weights
and biases, InstanceNorm affine 1 and 0, PReLU 0.25; the 3-D UNet's
BatchNorms get random statistics (gamma U(0.5, 1.5), beta and mean
U(-0.5, 0.5), var U(0.5, 2)) before folding, so folding mistakes show.
Everything comes from seeded numpy generators: the same bytes every run.

NAME.in.npy is a standard normal input; NAME.out.npy is onnxruntime's CPU
output for it, computed here. A stamp file (a hash of this file and of the
numpy, onnx and onnxruntime versions) makes a second run with nothing
changed return at once."""
import argparse
import hashlib
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NAMES = ["basicunet2d", "basicunet2d_ts", "basicunet2d_tiny", "unet3d_spleen"]
STAMP = ".make_models.stamp"
PRODUCER = ("segrt-tests", "tests/models/make_models.py")

# name: (weight seed, input shape); basicunet2d_ts is basicunet2d's network.
SPECS = {
    "basicunet2d": (0, (1, 3, 256, 256)),
    "basicunet2d_ts": (0, (1, 3, 256, 256)),
    "basicunet2d_tiny": (1, (2, 1, 96, 128)),
    "unet3d_spleen": (2, (1, 1, 64, 64, 64)),
}

F32 = np.float32
NOTSET = "NOTSET"


def conv_init(rng, cin, cout, k, nd, transposed=False):
    """PyTorch's default Conv/ConvTranspose initialisation: weight and bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = weight.shape[1] * k^nd."""
    shape = ((cin, cout) if transposed else (cout, cin)) + (k,) * nd
    bound = 1.0 / np.sqrt(shape[1] * k ** nd)
    w = rng.uniform(-bound, bound, shape).astype(F32)
    return w, rng.uniform(-bound, bound, cout).astype(F32)


def fold_random_batchnorm(rng, w, b, transposed=False):
    """A BatchNorm with random statistics after the convolution, folded in
    (eps 1e-5) as the exporter's FuseBatchNormIntoConv rewrite does."""
    c = b.shape[0]
    gamma = rng.uniform(0.5, 1.5, c)
    beta = rng.uniform(-0.5, 0.5, c)
    mean = rng.uniform(-0.5, 0.5, c)
    var = rng.uniform(0.5, 2.0, c)
    scale = gamma / np.sqrt(var + 1e-5)
    axis = 1 if transposed else 0
    shape = [1] * w.ndim
    shape[axis] = c
    w = (w * scale.reshape(shape)).astype(F32)
    return w, ((b - mean) * scale + beta).astype(F32)


class Graph:
    """Nodes, initializers and value_info in the order they are added.
    Initializers with identical dtype, shape and bytes are stored once,
    under the first name (the dynamo exporter's deduplication); `alias`
    maps the later names to it."""

    def __init__(self):
        self.nodes, self.inits, self.value_info = [], {}, []
        self.alias, self._seen = {}, {}

    def init(self, name, array):
        key = (array.dtype.str, array.shape, array.tobytes())
        if key in self._seen:
            self.alias[name] = self._seen[key]
        else:
            self._seen[key] = name
            self.inits[name] = array
        return self.ref(name)

    def ref(self, name):
        return self.alias.get(name, name)

    def node(self, op, inputs, output, name, attrs=(), dims=None):
        n = helper.make_node(op, inputs, [output], name=name)
        # Attributes in the exporter's order (make_node would sort them).
        n.attribute.extend(helper.make_attribute(k, v) for k, v in attrs)
        self.nodes.append(n)
        if dims is not None:
            self.value_info.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, dims))
        return output

    def model(self, inputs, outputs, opset, ir_version, with_value_info):
        vi = []
        if with_value_info:
            vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                  for k, a in self.inits.items()] + self.value_info
        graph = helper.make_graph(self.nodes, "main_graph", inputs, outputs,
                                  initializer=[numpy_helper.from_array(a, k) for k, a in self.inits.items()],
                                  value_info=vi)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version,
                                 producer_name=PRODUCER[0], producer_version=PRODUCER[1])


def counter(prefix):
    """name, name_1, name_2, ...: the exporters' naming of repeated ops."""
    n = [0]

    def next_name():
        k = n[0]
        n[0] += 1
        return prefix if k == 0 else f"{prefix}_{k}"
    return next_name


# ---------------------------------------------------------------------------
# BasicUNet (monai.networks.nets.BasicUNet, 2-D)

def basicunet_params(rng, cin, cout, fea):
    """The parameters in PyTorch's named_parameters() order."""
    p = {}

    def two_conv(prefix, a, b):
        for i, ci in enumerate([a, b]):
            p[f"{prefix}.conv_{i}.conv.weight"], p[f"{prefix}.conv_{i}.conv.bias"] = conv_init(rng, ci, b, 3, 2)
            p[f"{prefix}.conv_{i}.adn.N.weight"] = np.ones(b, F32)
            p[f"{prefix}.conv_{i}.adn.N.bias"] = np.zeros(b, F32)

    two_conv("conv_0", cin, fea[0])
    for i in range(1, 5):
        two_conv(f"down_{i}.convs", fea[i - 1], fea[i])
    # UpCat(in, cat, out, halves): deconv in -> in // 2 (in when not halves),
    # then TwoConv(cat + up, out).
    for i, (c_in, c_cat, c_out, halves) in zip((4, 3, 2, 1), [(fea[4], fea[3], fea[3], True),
                                                             (fea[3], fea[2], fea[2], True),
                                                             (fea[2], fea[1], fea[1], True),
                                                             (fea[1], fea[0], fea[5], False)]):
        up = c_in // 2 if halves else c_in
        p[f"upcat_{i}.upsample.deconv.weight"], p[f"upcat_{i}.upsample.deconv.bias"] = \
            conv_init(rng, c_in, up, 2, 2, transposed=True)
        two_conv(f"upcat_{i}.convs", c_cat + up, c_out)
    p["final_conv.weight"], p["final_conv.bias"] = conv_init(rng, fea[5], cout, 1, 2)
    return p


def basicunet_dynamo(params, cin, pad_name):
    """The graph torch.onnx.export(dynamo=True) writes for BasicUNet."""
    g = Graph()
    for k, a in params.items():
        g.init(k, a)
    g.init(pad_name, np.zeros(8, np.int64))
    names = {op: counter(op) for op in ["conv2d", "instance_norm", "leaky_relu", "max_pool2d", "convolution",
                                        "pad", "cat"]}

    def dims(c, level, up=False):
        sp = []
        for s in ["s53", "s0"]:
            if up:
                sp.append(f"2*(({s}//{2 ** level}))")
            else:
                sp.append(s if level == 0 else f"({s}//{2 ** level})")
        return ["s77", c] + sp

    def conv(x, prefix, level, k=3, output=None):
        w = params[f"{prefix}.weight"]
        out = names["conv2d"]()
        pads = [k // 2] * 4
        return g.node("Conv", [x, g.ref(f"{prefix}.weight"), g.ref(f"{prefix}.bias")], output or out,
                      f"node_{out}", [("group", 1), ("pads", pads), ("auto_pad", NOTSET), ("strides", [1, 1]),
                                      ("dilations", [1, 1]), ("kernel_shape", [k, k])],
                      None if output else dims(w.shape[0], level))

    def two_conv(x, prefix, level):
        for i in range(2):
            c = params[f"{prefix}.conv_{i}.conv.weight"].shape[0]
            x = conv(x, f"{prefix}.conv_{i}.conv", level)
            out = names["instance_norm"]()
            x = g.node("InstanceNormalization", [x, g.ref(f"{prefix}.conv_{i}.adn.N.weight"),
                                                 g.ref(f"{prefix}.conv_{i}.adn.N.bias")],
                       out, f"node_{out}", [("epsilon", 1e-5)], dims(c, level))
            out = names["leaky_relu"]()
            x = g.node("LeakyRelu", [x], out, f"node_{out}", [("alpha", 0.1)], dims(c, level))
        return x

    skips = [two_conv("image", "conv_0", 0)]
    for i in range(1, 5):
        c = params[f"down_{i}.convs.conv_0.conv.weight"].shape[1]
        out = names["max_pool2d"]()
        x = g.node("MaxPool", [skips[-1]], out, f"node_{out}",
                   [("storage_order", 0), ("dilations", [1, 1]), ("ceil_mode", 0), ("pads", [0, 0, 0, 0]),
                    ("auto_pad", NOTSET), ("strides", [2, 2]), ("kernel_shape", [2, 2])], dims(c, i))
        skips.append(two_conv(x, f"down_{i}.convs", i))
    x = skips.pop()
    for i in (4, 3, 2, 1):
        up = params[f"upcat_{i}.upsample.deconv.weight"].shape[1]
        out = names["convolution"]()
        x = g.node("ConvTranspose", [x, g.ref(f"upcat_{i}.upsample.deconv.weight"),
                                     g.ref(f"upcat_{i}.upsample.deconv.bias")], out, f"node_{out}",
                   [("group", 1), ("auto_pad", NOTSET), ("strides", [2, 2]), ("pads", [0, 0, 0, 0]),
                    ("output_padding", [0, 0]), ("dilations", [1, 1]), ("kernel_shape", [2, 2])],
                   dims(up, i, up=True))
        out = names["pad"]()
        x = g.node("Pad", [x, g.ref(pad_name)], out, f"node_{out}", [("mode", "edge")], dims(up, i, up=True))
        out = names["cat"]()
        c = params[f"upcat_{i}.convs.conv_0.conv.weight"].shape[1]
        x = g.node("Concat", [skips.pop(), x], out, f"node_{out}", [("axis", 1)], dims(c, i - 1))
        x = two_conv(x, f"upcat_{i}.convs", i - 1)
    conv(x, "final_conv", 0, k=1, output="logits")
    c_out = params["final_conv.weight"].shape[0]
    return g.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, ["s77", cin, "s53", "s0"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["s77", c_out, "s53", "s0"])],
                   opset=20, ir_version=10, with_value_info=True)


def basicunet_torchscript(params, cin):
    """The graph torch.onnx.export(dynamo=False, opset 17) writes for
    BasicUNet: ONNX names from the module paths, an Identity for each
    parameter equal to an earlier one, and before each Pad the arithmetic
    that turns F.pad's [0, 0, 0, 0] into ONNX pads (append zeros for the
    leading dims, reverse the pairs, flatten, cast)."""
    g = Graph()
    for k, a in params.items():
        g.init(k, a)
    # Later duplicates, last first, each an Identity of the first.
    for i, (dup, first) in enumerate(reversed(list(g.alias.items()))):
        g.node("Identity", [first], dup, f"Identity_{32 + i}")
    g.alias.clear()  # the nodes use the Identity outputs

    def node(op, inputs, name, attrs=(), output=None):
        return g.node(op, inputs, output or f"{name}_output_0", name, attrs)

    def const(name, values):
        return node("Constant", [], name, [("value", numpy_helper.from_array(np.array(values, np.int64)))])

    def conv(x, prefix, k=3, output=None):
        path = "/" + prefix.replace(".", "/")
        return node("Conv", [x, f"{prefix}.weight", f"{prefix}.bias"], f"{path}/Conv",
                    [("dilations", [1, 1]), ("group", 1), ("kernel_shape", [k, k]), ("pads", [k // 2] * 4),
                     ("strides", [1, 1])], output)

    def two_conv(x, prefix):
        for i in range(2):
            p = f"{prefix}.conv_{i}"
            path = "/" + p.replace(".", "/")
            x = conv(x, f"{p}.conv")
            x = node("InstanceNormalization", [x, f"{p}.adn.N.weight", f"{p}.adn.N.bias"],
                     f"{path}/adn/N/InstanceNormalization", [("epsilon", 1e-5)])
            x = node("LeakyRelu", [x], f"{path}/adn/A/LeakyRelu", [("alpha", 0.1)])
        return x

    skips = [two_conv("image", "conv_0")]
    for i in range(1, 5):
        x = node("MaxPool", [skips[-1]], f"/down_{i}/max_pooling/MaxPool",
                 [("ceil_mode", 0), ("dilations", [1, 1]), ("kernel_shape", [2, 2]), ("pads", [0, 0, 0, 0]),
                  ("strides", [2, 2])])
        skips.append(two_conv(x, f"down_{i}.convs"))
    x = skips.pop()
    for i in (4, 3, 2, 1):
        u = f"/upcat_{i}"
        x = node("ConvTranspose", [x, f"upcat_{i}.upsample.deconv.weight", f"upcat_{i}.upsample.deconv.bias"],
                 f"{u}/upsample/deconv/ConvTranspose",
                 [("dilations", [1, 1]), ("group", 1), ("kernel_shape", [2, 2]), ("pads", [0, 0, 0, 0]),
                  ("strides", [2, 2])])
        n = const(f"{u}/Constant", [4])
        pads = const(f"{u}/Constant_1", [0, 0, 0, 0])
        zeros = node("ConstantOfShape", [n], f"{u}/ConstantOfShape",
                     [("value", numpy_helper.from_array(np.array([0], np.int64)))])
        t = node("Concat", [pads, zeros], f"{u}/Concat", [("axis", 0)])
        t = node("Reshape", [t, const(f"{u}/Constant_2", [-1, 2])], f"{u}/Reshape", [("allowzero", 0)])
        axes = const(f"{u}/Constant_3", [0])
        starts = const(f"{u}/Constant_4", [-1])
        ends = const(f"{u}/Constant_5", [-(2 ** 63 - 1)])
        steps = const(f"{u}/Constant_6", [-1])
        t = node("Slice", [t, starts, ends, axes, steps], f"{u}/Slice")
        t = node("Transpose", [t], f"{u}/Transpose", [("perm", [1, 0])])
        t = node("Reshape", [t, const(f"{u}/Constant_7", [-1])], f"{u}/Reshape_1", [("allowzero", 0)])
        t = node("Cast", [t], f"{u}/Cast", [("to", TensorProto.INT64)])
        x = node("Pad", [x, t], f"{u}/Pad", [("mode", "edge")])
        x = node("Concat", [skips.pop(), x], f"{u}/Concat_1", [("axis", 1)])
        x = two_conv(x, f"upcat_{i}.convs")
    conv(x, "final_conv", k=1, output="logits")
    c_out = params["final_conv.weight"].shape[0]
    return g.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", cin, "d2", "d3"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", c_out, "d2", "d3"])],
                   opset=17, ir_version=8, with_value_info=False)


# ---------------------------------------------------------------------------
# UNet (monai.networks.nets.UNet, 3-D, residual units, BatchNorm)

def unet3d_spleen(rng):
    """The graph torch.onnx.export(dynamo=True) writes for the spleen UNet,
    after its optimizer folded each BatchNorm into the convolution before it
    (Conv or ConvTranspose, with a bias then) and deduplicated the PReLU
    weights into one [1, 1, 1, 1, 1] initializer."""
    chans, cin, cout = [16, 32, 64, 128, 256], 1, 2
    nest = ["model" + ".1.submodule" * k for k in range(5)]  # UNet's SkipConnection nesting
    downs = [nest[k] + ".0" for k in range(4)] + [nest[4]]
    ups = {k: nest[k] + ".2" for k in (3, 2, 1, 0)}
    g = Graph()
    # Down: ResidualUnit(subunits=2), Conv+BN+PReLU twice (the first with
    # stride 2) plus a residual Conv without norm (kernel 1, stride 1 at the
    # bottom, where the stride is 1 and only the channels change).
    for k, p in enumerate(downs):
        c_in = cin if k == 0 else chans[k - 1]
        for u, ci in enumerate([c_in, chans[k]]):
            w, b = fold_random_batchnorm(rng, *conv_init(rng, ci, chans[k], 3, 3))
            g.init(f"{p}.conv.unit{u}.conv.weight", w)
            g.init(f"{p}.conv.unit{u}.conv.bias", b)
        w, b = conv_init(rng, c_in, chans[k], 1 if k == 4 else 3, 3)
        g.init(f"{p}.residual.weight", w)
        g.init(f"{p}.residual.bias", b)
    # Up, deepest first: ConvTranspose (stride 2)+BN+PReLU over the Concat
    # of skip and deeper path, then ResidualUnit(subunits=1) with an identity
    # residual, whose Conv at the top has no norm or activation.
    for k in (3, 2, 1, 0):
        c_cat = chans[k] + (chans[4] if k == 3 else chans[k])
        c_up = cout if k == 0 else chans[k - 1]
        w, b = fold_random_batchnorm(rng, *conv_init(rng, c_cat, c_up, 3, 3, transposed=True), transposed=True)
        g.init(f"{ups[k]}.0.conv.weight", w)
        g.init(f"{ups[k]}.0.conv.bias", b)
        w, b = conv_init(rng, c_up, c_up, 3, 3)
        if k != 0:
            w, b = fold_random_batchnorm(rng, w, b)
        g.init(f"{ups[k]}.1.conv.unit0.conv.weight", w)
        g.init(f"{ups[k]}.1.conv.unit0.conv.bias", b)
    alpha = g.init("val_18", np.full((1, 1, 1, 1, 1), 0.25, F32))

    def dims(c, level, up=False):
        if up:
            return ["s77", c] + [f"2*((({s} - 1)//{2 ** level})) + 2" for s in ("s53", "s0", "s92")]
        return ["s77", c] + [f"((({s} - 1)//{2 ** level})) + 1" for s in ("s53", "s0", "s92")]

    fused = iter(range(17))  # node_Conv_131.. and getitem, getitem_3, ..: BatchNorm folded in
    prelus, cats = counter("prelu"), counter("cat")
    adds = iter([78, 139, 200, 261, 322, 383, 444, 505, 548])

    def conv(x, p, stride, k, dims_, unfused=None, transposed=False):
        if transposed:
            attrs = [("group", 1), ("auto_pad", NOTSET), ("strides", [2] * 3), ("pads", [1] * 6),
                     ("output_padding", [1] * 3), ("dilations", [1] * 3), ("kernel_shape", [3] * 3)]
        else:
            attrs = [("group", 1), ("pads", [k // 2] * 6), ("auto_pad", NOTSET), ("strides", [stride] * 3),
                     ("dilations", [1] * 3), ("kernel_shape", [k] * 3)]
        if unfused is None:
            j = next(fused)
            name = f"node_{'ConvTranspose' if transposed else 'Conv'}_{131 + j}"
            out = f"getitem_{3 * j}" if j else "getitem"
        else:
            out = f"conv3d_{unfused}" if unfused else "conv3d"
            name = f"node_{out}"
        return g.node("ConvTranspose" if transposed else "Conv", [x, f"{p}.weight", f"{p}.bias"], out, name,
                      attrs, dims_)

    def prelu(x, dims_):
        out = prelus()
        return g.node("PRelu", [x, alpha], out, f"node_{out}", (), dims_)

    def add(a, b, dims_, output=None):
        n = next(adds)
        return g.node("Add", [a, b], output or f"add_{n}", f"node_add_{n}", (), dims_)

    x, skips = "image", []
    for k, p in enumerate(downs):
        c, level, stride = chans[k], min(k + 1, 4), 1 if k == 4 else 2
        d = dims(c, level)
        res = conv(x, f"{p}.residual", stride, 1 if k == 4 else 3, d, unfused=3 * k)
        h = prelu(conv(x, f"{p}.conv.unit0.conv", stride, 3, d), d)
        h = prelu(conv(h, f"{p}.conv.unit1.conv", 1, 3, d), d)
        x = add(h, res, d)
        skips.append(x)
    x = skips.pop()
    for k in (3, 2, 1, 0):
        skip = skips.pop()
        c_up = cout if k == 0 else chans[k - 1]
        out = cats()
        x = g.node("Concat", [skip, x], out, f"node_{out}", [("axis", 1)],
                   dims(chans[k] + (chans[4] if k == 3 else chans[k]), k + 1))
        d = dims(c_up, k + 1, up=True)
        u = prelu(conv(x, f"{ups[k]}.0.conv", 2, 3, d, transposed=True), d)
        if k == 0:
            x = add(conv(u, f"{ups[k]}.1.conv.unit0.conv", 1, 3, d, unfused=18), u, None, output="logits")
        else:
            x = add(prelu(conv(u, f"{ups[k]}.1.conv.unit0.conv", 1, 3, d), d), u, d)
    return g.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, ["s77", cin, "s53", "s0", "s92"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, dims(cout, 1, up=True))],
                   opset=20, ir_version=10, with_value_info=True)


# ---------------------------------------------------------------------------

def build(name):
    """(ModelProto, input array) for one of NAMES."""
    seed, shape = SPECS[name]
    rng = np.random.default_rng(seed)
    if name in ("basicunet2d", "basicunet2d_ts"):
        params = basicunet_params(rng, 3, 2, (32, 32, 64, 128, 256, 32))
        model = basicunet_dynamo(params, 3, "val_15") if name == "basicunet2d" else basicunet_torchscript(params, 3)
    elif name == "basicunet2d_tiny":
        model = basicunet_dynamo(basicunet_params(rng, 1, 2, (8, 8, 16, 32, 64, 8)), 1, "val_14")
    else:
        model = unet3d_spleen(rng)
    onnx.checker.check_model(model)
    x = np.random.default_rng([seed, 1]).standard_normal(shape, dtype=F32)
    return model, x


def stamp_text():
    """This file's hash and the versions that shape the bytes written."""
    import importlib
    import importlib.metadata

    def version(module):  # without importing onnxruntime where its metadata says
        try:
            return importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:  # e.g. onnxruntime-gpu
            return importlib.import_module(module).__version__
    h = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    h.update(" ".join(f"{m} {version(m)}" for m in ("numpy", "onnx", "onnxruntime")).encode())
    return h.hexdigest() + "\n"


def up_to_date(outdir):
    outdir = pathlib.Path(outdir)
    stamp = outdir / STAMP
    return (stamp.is_file() and stamp.read_text() == stamp_text()
            and all((outdir / f"{n}{ext}").is_file() for n in NAMES for ext in (".onnx", ".in.npy", ".out.npy")))


def reference(model, x):
    """onnxruntime's CPU output, on one thread so that it is the same
    however many cores the machine has."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


def write(path, data):
    """Writes bytes through a temporary file, so that an interrupted run
    leaves no truncated file behind."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def npy_bytes(a):
    import io
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def make_models(outdir, force=False):
    """Writes the models and their reference pairs into outdir unless they
    are there already from this generator; returns outdir as a Path."""
    outdir = pathlib.Path(outdir)
    if not force and up_to_date(outdir):
        return outdir
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / STAMP).unlink(missing_ok=True)
    for name in NAMES:
        model, x = build(name)
        write(outdir / f"{name}.onnx", model.SerializeToString())
        write(outdir / f"{name}.in.npy", npy_bytes(x))
        write(outdir / f"{name}.out.npy", npy_bytes(reference(model, x)))
    write(outdir / STAMP, stamp_text().encode())
    return outdir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="folder for NAME.onnx, NAME.in.npy, NAME.out.npy")
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    a = ap.parse_args(argv)
    fresh = a.force or not up_to_date(a.outdir)
    make_models(a.outdir, a.force)
    print(f"make_models: {', '.join(NAMES)} in {a.outdir}" + ("" if fresh else " (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
