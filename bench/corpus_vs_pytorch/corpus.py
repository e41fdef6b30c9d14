"""The public model corpus of issue 41: segmentation networks no test or
benchmark of segrt was tuned on, as users build them (MONAI, nnU-Net's
dynamic_network_architectures, a SegFormer written here), with seeded
random weights. Each entry says how to build the network, its spatial
dims and channels, the shape the benchmark runs it at (patches of 512^2
at batch 16 for 2-D; 128^3 at batch 2 or 96^3 at batch 4 for 3-D) and a
smaller one for checking numbers on a CPU.

    NETWORKS[name] = Net(build, dims, in_ch, bench_shape, check_shape, what)

Weights: every parameter drawn from a seeded normal scaled by 1/sqrt(fan
in), norm scales near 1 and shifts near 0, so that activations stay O(1)
through deep networks (the constructors' initialisations leave some of
them, transformers' above all, with outputs near zero, which would make a
relative error meaningless)."""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
from torch import nn


@dataclasses.dataclass
class Net:
    build: Callable[[], nn.Module]
    dims: int
    in_ch: int
    bench_shape: tuple  # (N, C, spatial...) for the GPU benchmark
    check_shape: tuple  # smaller, for FP32 numbers on a CPU
    what: str


def _monai():
    from monai.networks import nets
    if hasattr(nets.resnet.ResNet, "_downsample_basic_block"):
        nets.resnet.ResNet._downsample_basic_block = _shortcut_a
    return nets


def _shortcut_a(self, x, planes, stride, spatial_dims=3):
    """MONAI's ResNet shortcut "A" (a stride-s average pool of kernel 1,
    then zero channels up to `planes`), which its ResNet-18/34 use, without
    the `out.data` MONAI concatenates: TorchScript's exporter records
    `.data` as a constant, the pooled export input, so the exported graph
    reproduced the network only at the input it was traced with (4 % rel.
    L2 at any other; FlexibleUNet-ResNet-34 at 36.9 dB in every precision,
    docs/perf.md 2026-12-01). Without gradients `.data` changes nothing;
    MONAI's ResNets built here get this method instead of theirs."""
    f = torch.nn.functional
    out = {1: f.avg_pool1d, 2: f.avg_pool2d, 3: f.avg_pool3d}[spatial_dims](x, kernel_size=1, stride=stride)
    zeros = torch.zeros(out.size(0), planes - out.size(1), *out.shape[2:], dtype=out.dtype, device=out.device)
    return torch.cat([out, zeros], dim=1)


def _dna():
    from dynamic_network_architectures.architectures.unet import PlainConvUNet, ResidualEncoderUNet
    return PlainConvUNet, ResidualEncoderUNet


def nnunet(dims, residual):
    """nnU-Net's networks as its planner writes them for a CT: 6 stages
    32-320 in 3-D (7 stages 32-512 in 2-D), 3x3(x3) kernels, instance
    norm, LeakyReLU, no deep supervision; PlainConvUNet (two convolutions
    a stage) or ResidualEncoderUNet as ResEnc M (encoder blocks 1-3-4-6-6-6,
    one convolution a decoder stage)."""
    PlainConvUNet, ResidualEncoderUNet = _dna()
    conv = nn.Conv3d if dims == 3 else nn.Conv2d
    stages = 6 if dims == 3 else 7
    common = dict(input_channels=1 if dims == 3 else 3, n_stages=stages,
                  features_per_stage=[min(32 * 2 ** i, 320 if dims == 3 else 512) for i in range(stages)],
                  conv_op=conv, kernel_sizes=3, strides=[1] + [2] * (stages - 1), num_classes=4, conv_bias=True,
                  norm_op=nn.InstanceNorm3d if dims == 3 else nn.InstanceNorm2d,
                  norm_op_kwargs={"eps": 1e-5, "affine": True}, nonlin=nn.LeakyReLU,
                  nonlin_kwargs={"inplace": True}, deep_supervision=False)
    if residual:
        return ResidualEncoderUNet(n_blocks_per_stage=[1, 3, 4, 6, 6, 6, 6][:stages], n_conv_per_stage_decoder=1,
                                   **common)
    return PlainConvUNet(n_conv_per_stage=2, n_conv_per_stage_decoder=2, **common)


def monai_unet_res3d():
    """MONAI's UNet with two residual units a level, PReLU, instance norm."""
    return _monai().UNet(3, 1, 4, (32, 64, 128, 256, 320), (2, 2, 2, 2), num_res_units=2)


def flexible_unet(backbone):
    """A 2-D UNet on a ResNet or EfficientNet encoder (MONAI FlexibleUNet)."""
    return _monai().FlexibleUNet(3, 5, backbone, pretrained=False, spatial_dims=2)


def attention_unet():
    """MONAI's AttentionUnet: attention gates on the skip connections."""
    return _monai().AttentionUnet(2, 3, 4, (32, 64, 128, 256, 512), (2, 2, 2, 2))


def dynunet_k5():
    """A 3-D DynUNet with 5x5x5 kernels in its first three levels."""
    k = [[5, 5, 5], [5, 5, 5], [5, 5, 5], [3, 3, 3], [3, 3, 3]]
    s = [[1, 1, 1], [2, 2, 2], [2, 2, 2], [2, 2, 2], [2, 2, 2]]
    return _monai().DynUNet(3, 1, 4, k, s, s[1:], filters=(32, 64, 128, 256, 320), norm_name="instance",
                            res_block=True)


def segresnet():
    """MONAI's SegResNet: group norm, residual blocks, trilinear upsampling."""
    return _monai().SegResNet(3, init_filters=16, in_channels=4, out_channels=3, blocks_down=(1, 2, 2, 4),
                              blocks_up=(1, 1, 1), upsample_mode="nontrainable")


def unetr():
    """MONAI's UNETR: a ViT-B/16 encoder over 96^3 patches."""
    return _monai().UNETR(1, 14, (96, 96, 96), feature_size=16, hidden_size=768, mlp_dim=3072, num_heads=12,
                          proj_type="conv", norm_name="instance", res_block=True)


def swin_unetr():
    """MONAI's SwinUNETR (shifted windows, 3-D), feature size 48."""
    return _monai().SwinUNETR(in_channels=1, out_channels=14, feature_size=48, spatial_dims=3)


def vnet():
    return _monai().VNet(3, 1, 2, dropout_prob_down=None, dropout_prob_up=(None, 0.0))


def basic_unet2d():
    """The shared basicunet2d's architecture (MONAI BasicUNet, 2-D, 3 -> 2)."""
    return _monai().BasicUNet(2, 3, 2)


def unet3d_spleen():
    """The shared unet3d_spleen's architecture (MONAI's spleen tutorial UNet)."""
    return _monai().UNet(3, 1, 2, (16, 32, 64, 128, 256), (2, 2, 2, 2), num_res_units=2, norm="batch")


# --- a SegFormer-style 2-D transformer (MiT-B0 encoder, all-MLP decoder) ----

class _OverlapPatchEmbed(nn.Module):
    def __init__(self, cin, cout, k, s):
        super().__init__()
        self.proj = nn.Conv2d(cin, cout, k, s, k // 2)
        self.norm = nn.LayerNorm(cout)

    def forward(self, x):
        x = self.proj(x)
        n, c, h, w = x.shape
        return self.norm(x.flatten(2).transpose(1, 2)), h, w


class _EfficientAttention(nn.Module):
    """Multi-head attention whose keys and values come from the tokens
    shrunk by a strided convolution (ratio sr)."""

    def __init__(self, dim, heads, sr):
        super().__init__()
        self.heads, self.sr = heads, sr
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        if sr > 1:
            self.reduce = nn.Conv2d(dim, dim, sr, sr)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x, h, w):
        n, t, c = x.shape
        d = c // self.heads
        q = self.q(x).reshape(n, t, self.heads, d).transpose(1, 2)
        if self.sr > 1:
            y = self.reduce(x.transpose(1, 2).reshape(n, c, h, w)).flatten(2).transpose(1, 2)
            y = self.norm(y)
        else:
            y = x
        k, v = self.kv(y).reshape(n, -1, 2, self.heads, d).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(n, t, c))


class _MixFFN(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x, h, w):
        x = self.fc1(x)
        n, t, c = x.shape
        x = self.dw(x.transpose(1, 2).reshape(n, c, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(nn.functional.gelu(x))


class _Block(nn.Module):
    def __init__(self, dim, heads, sr):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _EfficientAttention(dim, heads, sr)
        self.ffn = _MixFFN(dim, 4 * dim)

    def forward(self, x, h, w):
        x = x + self.attn(self.n1(x), h, w)
        return x + self.ffn(self.n2(x), h, w)


class SegFormer(nn.Module):
    """MiT-B0 (dims 32-64-160-256, depths 2-2-2-2, reductions 8-4-2-1) and
    SegFormer's all-MLP head: each stage projected to 256, upsampled
    bilinearly to 1/4, concatenated, fused, classified, upsampled to the
    input."""

    def __init__(self, in_ch=3, classes=5, dims=(32, 64, 160, 256), heads=(1, 2, 5, 8), srs=(8, 4, 2, 1),
                 depth=2, head_dim=256):
        super().__init__()
        self.embeds = nn.ModuleList()
        self.stages = nn.ModuleList()
        self.norms = nn.ModuleList()
        c = in_ch
        for i, d in enumerate(dims):
            self.embeds.append(_OverlapPatchEmbed(c, d, 7 if i == 0 else 3, 4 if i == 0 else 2))
            self.stages.append(nn.ModuleList(_Block(d, heads[i], srs[i]) for _ in range(depth)))
            self.norms.append(nn.LayerNorm(d))
            c = d
        self.lin = nn.ModuleList(nn.Linear(d, head_dim) for d in dims)
        self.fuse = nn.Sequential(nn.Conv2d(4 * head_dim, head_dim, 1, bias=False), nn.BatchNorm2d(head_dim),
                                  nn.ReLU())
        self.cls = nn.Conv2d(head_dim, classes, 1)

    def forward(self, x):
        size = x.shape[2:]
        feats = []
        for embed, blocks, norm in zip(self.embeds, self.stages, self.norms):
            t, h, w = embed(x)
            for b in blocks:
                t = b(t, h, w)
            x = norm(t).transpose(1, 2).reshape(t.shape[0], -1, h, w)
            feats.append(x)
        quarter = feats[0].shape[2:]
        ups = []
        for f, lin in zip(feats, self.lin):
            y = lin(f.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(f.shape[0], -1, *f.shape[2:])
            ups.append(nn.functional.interpolate(y, size=quarter, mode="bilinear", align_corners=False))
        y = self.cls(self.fuse(torch.cat(ups[::-1], dim=1)))
        return nn.functional.interpolate(y, size=size, mode="bilinear", align_corners=False)


NETWORKS = {
    "plainunet_3d": Net(lambda: nnunet(3, False), 3, 1, (2, 1, 128, 128, 128), (1, 1, 64, 64, 64),
                        "nnU-Net PlainConvUNet 3-D, 6 stages 32-320, instance norm, LeakyReLU"),
    "plainunet_2d": Net(lambda: nnunet(2, False), 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                        "nnU-Net PlainConvUNet 2-D, 7 stages 32-512"),
    "resencunet_3d": Net(lambda: nnunet(3, True), 3, 1, (2, 1, 128, 128, 128), (1, 1, 64, 64, 64),
                         "nnU-Net ResidualEncoderUNet 3-D (ResEnc M blocks 1-3-4-6-6-6)"),
    "resencunet_2d": Net(lambda: nnunet(2, True), 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                         "nnU-Net ResidualEncoderUNet 2-D, 7 stages"),
    "monai_unet_res_3d": Net(monai_unet_res3d, 3, 1, (2, 1, 128, 128, 128), (1, 1, 64, 64, 64),
                             "MONAI UNet, 2 residual units a level, PReLU, instance norm"),
    "unet_resnet34_2d": Net(lambda: flexible_unet("resnet34"), 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                            "MONAI FlexibleUNet on a ResNet-34 encoder, batch norm"),
    "unet_effnetb0_2d": Net(lambda: flexible_unet("efficientnet-b0"), 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                            "MONAI FlexibleUNet on an EfficientNet-B0 encoder (depthwise, SiLU, squeeze-excite)"),
    "attention_unet_2d": Net(attention_unet, 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                             "MONAI AttentionUnet: attention gates on the skips"),
    "dynunet_k5_3d": Net(dynunet_k5, 3, 1, (2, 1, 128, 128, 128), (1, 1, 64, 64, 64),
                         "MONAI DynUNet, 5x5x5 kernels in the first three levels, residual blocks"),
    "segresnet_3d": Net(segresnet, 3, 4, (2, 4, 128, 128, 128), (1, 4, 64, 64, 64),
                        "MONAI SegResNet: group norm, residual blocks, trilinear upsampling"),
    "vnet_3d": Net(vnet, 3, 1, (2, 1, 128, 128, 128), (1, 1, 64, 64, 64),
                   "MONAI VNet: 5x5x5 kernels, ELU, batch norm, residual stages"),
    "unetr_3d": Net(unetr, 3, 1, (4, 1, 96, 96, 96), (1, 1, 96, 96, 96),
                    "MONAI UNETR: ViT-B/16 encoder (12 layers, 768 wide)"),
    "swin_unetr_3d": Net(swin_unetr, 3, 1, (4, 1, 96, 96, 96), (1, 1, 64, 64, 64),
                         "MONAI SwinUNETR, feature size 48: shifted-window attention in 3-D"),
    "segformer_b0_2d": Net(SegFormer, 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                           "SegFormer-B0 style: Mix Transformer encoder, all-MLP decoder"),
    "basicunet2d": Net(basic_unet2d, 2, 3, (16, 3, 512, 512), (2, 3, 128, 128),
                       "the shared basicunet2d's architecture (MONAI BasicUNet)"),
    "unet3d_spleen": Net(unet3d_spleen, 3, 1, (4, 1, 96, 96, 96), (1, 1, 64, 64, 64),
                         "the shared unet3d_spleen's architecture (MONAI UNet, batch norm)"),
}


def randomise(model: nn.Module, seed: int) -> nn.Module:
    """Seeded weights that keep activations O(1) (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            elif "weight" in name:  # norm scales, PReLU slopes
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(1.0 + 0.1 * torch.rand(b.shape, generator=g))
    return model.eval()


def make(name: str, seed: int = 0) -> nn.Module:
    return randomise(NETWORKS[name].build(), seed)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
