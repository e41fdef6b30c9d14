"""bench/corpus_vs_pytorch/layers.py: where a corpus network's numbers
depart. The network (corpus.py, seeded weights) is exported by TorchScript
at its bench shape, the outputs of the chosen operators are added to the
graph's outputs, and segrt's values (CUDA, or --device cpu) at each
precision asked for are
compared with onnxruntime's FP32 ones on the CPU, in graph order, at an
input the exporter did not trace:

    python3 bench/corpus_vs_pytorch/layers.py --net unet3d_spleen [--precision fp16,tf32,fp32]
        [--ops PRelu,Concat,Add] [--batch N] [--device cuda|cpu] [--work DIR]

Each line: relative L2 error, the value's name, its shape and RMS. The
first line whose error jumps names the layer to look at. Asking for a
value as an output can change the plan (a BatchNormalization folds into
the convolution before it only while the convolution's own output is not
asked for; the default operators keep such folds). Needs torch,
onnxruntime, monai / dynamic_network_architectures (as run.py) and
SEGRT_LIB; `scripts/gpu-check.sh layers NET [PRECISIONS]` sets them up."""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "python"))  # segrt_capi


def with_outputs(path_in, path_out, ops):
    """The model at path_in with every output of an operator in ops added
    to its graph outputs (float32, shape left to inference); their names."""
    import onnx
    g = onnx.load(str(path_in))
    have = {o.name for o in g.graph.output}
    for n in g.graph.node:
        if n.op_type in ops and n.output[0] not in have:
            g.graph.output.append(onnx.helper.make_tensor_value_info(n.output[0], onnx.TensorProto.FLOAT, None))
            have.add(n.output[0])
    onnx.save(g, str(path_out))
    return [o.name for o in g.graph.output]


def rel_l2(got, ref):
    got, ref = got.astype(np.float64), ref.astype(np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def main() -> int:
    import corpus  # torch: only where the network is made (with_outputs is tested without it)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, choices=sorted(corpus.NETWORKS))
    ap.add_argument("--precision", default="fp16,tf32,fp32")
    ap.add_argument("--ops", default="PRelu,Concat,Add")
    ap.add_argument("--batch", type=int, default=None, help="the bench shape's batch by default")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--work", default="/tmp/segrt-layers")
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    import segrt_capi as sc
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    shape = tuple(corpus.NETWORKS[a.net].bench_shape)
    if a.batch:
        shape = (a.batch,) + shape[1:]
    g = torch.Generator().manual_seed(1)
    x_trace, x = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    plain, wide = work / f"{a.net}.onnx", work / f"{a.net}.layers.onnx"
    torch.onnx.export(corpus.make(a.net), (x_trace,), str(plain), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    names = with_outputs(plain, wide, set(a.ops.split(",")))
    ref = ort.InferenceSession(str(wide)).run(names, {"x": x.numpy()})
    by_name = dict(zip(names, ref))
    for prec in a.precision.split(","):
        print(f"== segrt {a.device} {prec} against onnxruntime FP32 (CPU), {len(names)} values", flush=True)
        with sc.Model.load(str(wide)) as model, \
                sc.BuildOptions(shapes={"x": shape}, device=a.device, precision=prec) as opts, \
                sc.Engine.build(model, opts) as engine, engine.context() as ctx:
            got = ctx.run({"x": x.numpy()})  # host arrays: the engine copies them in and out
            for desc, o in zip(engine.outputs(), got):
                r = by_name[desc["name"]]
                print(f"{rel_l2(o, r):9.2e} {desc['name']} {tuple(r.shape)} rms "
                      f"{float(np.sqrt((r.astype(np.float64) ** 2).mean())):.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
