"""Small models and images for the hostile suite, made in the case's sandbox."""
import numpy as np
from onnx import TensorProto, helper

from onnx_util import init, save_model, tensor_input


def convnet(path, channels=1, classes=2, seed=0, metadata=None):
    """A 2-D Conv-Relu-Conv network over N x channels x H x W, any size."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"], kernel_shape=[1, 1], name="conv2"),
    ]
    inits = [init("w1", rng.standard_normal((4, channels, 3, 3)).astype(np.float32)),
             init("b1", np.zeros(4, np.float32)),
             init("w2", rng.standard_normal((classes, 4, 1, 1)).astype(np.float32)),
             init("b2", np.zeros(classes, np.float32))]
    m = save_model(path, nodes, [tensor_input("x", ["N", channels, "H", "W"])],
                   [tensor_input("y", ["N", classes, "H", "W"])], inits)
    if metadata:
        import onnx
        for k, v in metadata.items():
            e = m.metadata_props.add()
            e.key, e.value = k, v
        onnx.save(m, str(path))
    return path


def image_npy(path, shape=(1, 1, 32, 32), seed=0):
    np.save(path, np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
    return path


def grey_png(path, h=32, w=32):
    from PIL import Image
    Image.fromarray((np.arange(h * w) % 251).astype(np.uint8).reshape(h, w)).save(path)
    return path


def npy_bytes(a):
    import io
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


FLOAT = TensorProto.FLOAT
