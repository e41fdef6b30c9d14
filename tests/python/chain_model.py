"""A chain of n elementwise nodes on a small float tensor, and its numpy result.

The chain reads a real graph input, so no pass can fold it away, and mixes
operators with and without constants (Add and Mul with a constant of their
own, Relu, Sigmoid, Neg, Abs, Tanh, Sub) so that importer, inference, passes
and plan see one value and usually one initializer per node: the shape of a
large graph, without large tensors. The operators are bounded or contracting,
so the values neither vanish nor grow over any length of chain."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (operator, takes a constant); the cycle repeats along the chain.
_CYCLE = [("Mul", True), ("Add", True), ("Tanh", False), ("Neg", False), ("Abs", False),
          ("Sub", True), ("Sigmoid", False), ("Relu", False), ("Mul", True), ("Neg", False)]


def _const(i):
    """The constant of node i: a few fixed values near 1 (Mul) or 0 (Add, Sub)."""
    return np.float32(0.5 + 0.125 * (i % 7)), np.float32(0.0625 * ((i % 5) - 2))


def make_chain(n, shape=(1, 4, 8, 8)):
    """The ONNX model of a chain of n nodes from input `x` to output `y`."""
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        op, has_const = _CYCLE[i % len(_CYCLE)]
        out = "y" if i == n - 1 else f"t{i}"
        inputs = [prev]
        if has_const:
            scale, shift = _const(i)
            c = scale if op == "Mul" else shift
            inits.append(numpy_helper.from_array(np.array([c], np.float32), f"c{i}"))
            inputs.append(f"c{i}")
        nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def chain_reference(x, n):
    """What the chain of n nodes computes on x, in float32 as segrt does."""
    y = x.astype(np.float32)
    for i in range(n):
        op, _ = _CYCLE[i % len(_CYCLE)]
        scale, shift = _const(i)
        if op == "Mul":
            y = y * scale
        elif op == "Add":
            y = y + shift
        elif op == "Sub":
            y = y - shift
        elif op == "Tanh":
            y = np.tanh(y)
        elif op == "Neg":
            y = -y
        elif op == "Abs":
            y = np.abs(y)
        elif op == "Sigmoid":
            y = np.float32(1) / (np.float32(1) + np.exp(-y))
        elif op == "Relu":
            y = np.maximum(y, np.float32(0))
        y = y.astype(np.float32)
    return y


def save_chain(path, n, shape=(1, 4, 8, 8)):
    onnx.save(make_chain(n, shape), str(path))


def make_chain_variant(n, variant, shape=(1, 4, 8, 8)):
    """Chains that stress one pass each, computing what make_chain(n) does:

    reversed   the nodes listed in reverse order (topological sorting)
    identity   an Identity, Dropout or same-shape Reshape after every node
               (simplification removes 3 nodes of 4)
    outputs    every 10th value also a graph output, declared with a
               symbolic batch dim of its own (graph outputs and symbols)
    """
    model = make_chain(n, shape)
    g = model.graph
    if variant == "reversed":
        nodes = list(g.node)[::-1]
        del g.node[:]
        g.node.extend(nodes)
    elif variant == "identity":
        nodes = []
        g.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), "shape"))
        for i, node in enumerate(g.node):
            out = node.output[0]
            node.output[0] = f"{out}_pre"
            kind = i % 3
            if kind == 0:
                extra = helper.make_node("Identity", [node.output[0]], [out], name=f"id{i}")
            elif kind == 1:
                extra = helper.make_node("Dropout", [node.output[0]], [out], name=f"drop{i}")
            else:
                extra = helper.make_node("Reshape", [node.output[0], "shape"], [out], name=f"rs{i}")
            nodes += [node, extra]
        del g.node[:]
        g.node.extend(nodes)
    elif variant == "outputs":
        for i in range(0, n - 1, 10):
            g.output.append(helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT,
                                                          [f"b{i}"] + list(shape[1:])))
    else:
        raise ValueError(variant)
    return model
