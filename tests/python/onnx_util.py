"""Small helpers to build ONNX test models and compare arrays."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save_model(path, nodes, inputs, outputs, initializers=(), opset=17, ir_version=8, check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="segrt-tests")
    model.ir_version = ir_version
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return model


def tensor_input(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def ort_run(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
