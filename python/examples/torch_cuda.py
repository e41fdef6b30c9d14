"""A torch CUDA tensor in and out of a segrt engine, without copies: the
input is read where torch keeps it, the output is segrt's memory seen by
torch, and out= writes into a tensor of torch's.

    python torch_cuda.py MODEL.onnx [--size 512]"""
import argparse

import torch

import segrt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--size", type=int, default=512)
    args = ap.parse_args()
    s = args.size

    # The lines a user writes:
    engine = segrt.Engine(args.model, device="cuda", precision="fp16", shapes={"image": (1, 3, s, s)})
    x_cuda = torch.rand(1, 3, s, s, device="cuda")
    y = torch.from_dlpack(engine(x_cuda))   # shares segrt's output memory
    z = torch.empty_like(y)
    engine(x_cuda, out=z)                    # or into a tensor of your own
    engine.close()

    assert y.is_cuda and y.shape == (1, 2, s, s) and torch.equal(y, z)
    print(f"torch_cuda: {tuple(x_cuda.shape)} -> {tuple(y.shape)} on {y.device}, out= equal: {torch.equal(y, z)}")


if __name__ == "__main__":
    main()
