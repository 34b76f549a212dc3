#!/usr/bin/env python3
"""Writes the layer-chain model presets (configs/models/{resnet50,resnet1001,vgg19,unet}.json).

  scripts/gen_chain_presets.py [--check]   (--check: fail if a file would change)

Each preset is a chain of stages (docs/input-format.md, `chain`): a stage is a
layer or a block whose input is the previous stage's output. Every number is
per input sample, derived here from the published architecture:

  conv k×k, c_in → c_out, output h×w:  FLOPs = 2·c_in·c_out·k²·h·w (a
      multiply-add is 2 FLOPs), params = c_in·c_out·k² (+ c_out with a bias)
  fully connected n_in → n_out:        FLOPs = 2·n_in·n_out, params = n_in·n_out + n_out
  batch norm on c channels:            2·c params (scale, shift); no matrix FLOPs
  backward FLOPs: 2× forward (input and weight gradients); 1× for the first
      layer, whose input needs no gradient
  bytes: fp32, 4 bytes per element, as the papers trained.

What a stage saves for backward (`saved_bytes`, beyond its input and
output) follows a memory-frugal framework (MXNet's or PyTorch's in-place
ReLU): a convolution keeps its input, batch norm its input, ReLU its output
(in place over what it read), max pooling its input, addition nothing.
`workspace_bytes` is the gradient of the largest tensor inside the stage,
alive during its backward (0 when the stage has no inner tensor).

Architectures and the batch/resolution assumed:
- resnet50: He et al. 2016, "Deep Residual Learning for Image Recognition",
  Table 1, 50-layer: bottleneck units [3, 4, 6, 3], post-activation (conv,
  BN, ReLU), downsampling by the first 1×1 conv of conv3_1, conv4_1,
  conv5_1 (stride 2), projection shortcuts (1×1 conv + BN) where the shape
  changes. ImageNet 224×224. Check: 25.6 M parameters, 3.8 G multiply-adds.
- resnet1001: the 1,000-layer ImageNet residual network of Chen et al. 2016,
  "Training Deep Nets with Sublinear Memory Cost", Sec. 5: bottleneck units
  with the pre-activation ordering of He et al. 2016, "Identity Mappings in
  Deep Residual Networks" (BN, ReLU, conv; the 1,001-layer network of that
  paper), depth grown evenly over the four ImageNet stages: [83, 83, 83, 84]
  units = 333 units × 3 convs + stem conv + classifier = 1,001 layers.
  ImageNet 224×224 (Chen's setting: batch 32, input 3×224×224), not He et
  al.'s CIFAR 32×32 ResNet-1001 (3 stages of 111 units): Chen's 48 GB → 7 GB
  claim is for ImageNet inputs, and CIFAR feature maps are 49× smaller.
  Downsampling by the 3×3 conv of each stage's first unit, as in He et al.'s
  pre-activation code (fb.resnet.torch preresnet.lua).
- vgg19: Simonyan & Zisserman 2015, configuration E: 16 conv3 layers (64,
  64, M, 128, 128, M, 256×4, M, 512×4, M, 512×4, M) and three fully
  connected layers (4096, 4096, 1000) with dropout. Stages: each conv+ReLU
  (with the following max pool), each FC. ImageNet 224×224. Check: 143.7 M
  parameters, 19.6 G multiply-adds.
- unet: Ronneberger et al. 2015, "U-Net", Fig. 1: 572×572 single-channel
  input, unpadded 3×3 convs, 2×2 max pools, 2×2 up-convs, 64…1024 channels,
  cropped skip connections, final 1×1 conv to 2 classes (388×388 output);
  23 convolutional layers. As a chain, a stage's output carries every skip
  tensor the decoder will still need (so the state grows down the encoder
  and shrinks up the decoder). Check: 31.0 M parameters.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E = 4  # bytes per element (fp32)


def conv_flops(c_in, c_out, k, h, w):
    return 2 * c_in * c_out * k * k * h * w


def conv_params(c_in, c_out, k, bias):
    return c_in * c_out * k * k + (c_out if bias else 0)


def layer(name, fwd, params, out, saved=0, work=0, bwd=None):
    d = {"name": name, "fwd_flops": fwd}
    if bwd is not None and bwd != 2 * fwd:
        d["bwd_flops"] = bwd
    d["params"] = params
    d["output_bytes"] = out * E
    d["saved_bytes"] = saved * E
    d["workspace_bytes"] = work * E
    return d


def compress(layers):
    """Runs of identical layers named BASE.1, BASE.2, ... as {"repeat": N, "layers": [BASE]}."""
    def key(l):
        return l["name"].rsplit(".", 1)[0], {k: v for k, v in l.items() if k != "name"}

    out = []
    i = 0
    while i < len(layers):
        j = i
        while (j + 1 < len(layers) and "." in layers[i]["name"] and key(layers[j + 1]) == key(layers[i])
               and layers[j + 1]["name"] == f"{key(layers[i])[0]}.{j + 2 - i}"):
            j += 1
        if j > i:
            base = dict(layers[i])
            base["name"] = layers[i]["name"].rsplit(".", 1)[0]
            out.append({"repeat": j - i + 1, "layers": [base]})
        else:
            out.append(layers[i])
        i = j + 1
    return out


# --- ResNets -------------------------------------------------------------------

def resnet_stem(first_bwd=True):
    # conv 7×7/2, 3→64 (no bias), BN, ReLU, max pool 3×3/2: 224 → 112 → 56.
    f = conv_flops(3, 64, 7, 112, 112)
    params = conv_params(3, 64, 7, False) + 2 * 64
    conv_out = 64 * 112 * 112
    # saved: conv output (BN's input), ReLU output (max pool's input).
    return layer("stem", f, params, 64 * 56 * 56, saved=2 * conv_out, work=conv_out, bwd=f)


def resnet_head(c, hw, classes=1000, preact=False):
    # [BN, ReLU (pre-activation only)], global average pool, FC, softmax loss.
    f = 2 * c * classes
    params = c * classes + classes + (2 * c if preact else 0)
    saved = c + (c * hw * hw if preact else 0)  # pooled vector (+ ReLU output)
    return layer("head", f, params, classes, saved=saved, work=c * hw * hw)


def bottleneck_v1(name, c_in, c_out, h_in, stride):
    """He et al. 2016 (post-activation): 1×1 (stride) → BN → ReLU → 3×3 → BN → ReLU → 1×1 → BN, + shortcut, ReLU."""
    w = c_out // 4
    h = h_in // stride
    hw = h * h
    f = conv_flops(c_in, w, 1, h, h) + conv_flops(w, w, 3, h, h) + conv_flops(w, c_out, 1, h, h)
    params = conv_params(c_in, w, 1, False) + conv_params(w, w, 3, False) + conv_params(w, c_out, 1, False)
    params += 2 * (w + w + c_out)
    # conv1 out (BN), ReLU out (conv2 in), conv2 out (BN), ReLU out (conv3 in),
    # conv3 out (BN); the sum's ReLU output is the stage output.
    saved = 2 * w * hw + 2 * w * hw + c_out * hw
    if c_in != c_out or stride != 1:  # projection: 1×1 conv (stride) + BN
        f += conv_flops(c_in, c_out, 1, h, h)
        params += conv_params(c_in, c_out, 1, False) + 2 * c_out
        saved += c_out * hw  # projection conv output (its BN's input)
    return layer(name, f, params, c_out * hw, saved=saved, work=2 * c_out * hw)


def bottleneck_v2(name, c_in, c_out, h_in, stride):
    """He et al. 2016, identity mappings (pre-activation): BN → ReLU → 1×1 → BN → ReLU → 3×3 (stride) → BN → ReLU → 1×1, + shortcut."""
    w = c_out // 4
    h = h_in // stride
    hw_in, hw = h_in * h_in, h * h
    f = conv_flops(c_in, w, 1, h_in, h_in) + conv_flops(w, w, 3, h, h) + conv_flops(w, c_out, 1, h, h)
    params = conv_params(c_in, w, 1, False) + conv_params(w, w, 3, False) + conv_params(w, c_out, 1, False)
    params += 2 * (c_in + w + w)
    # ReLU1 out (conv1 and projection input), conv1 out (BN), ReLU out (conv2
    # in), conv2 out (BN), ReLU out (conv3 in); conv3 + shortcut is the output.
    saved = c_in * hw_in + 2 * w * hw_in + 2 * w * hw
    if c_in != c_out or stride != 1:  # projection of the pre-activated input
        f += conv_flops(c_in, c_out, 1, h, h)
        params += conv_params(c_in, c_out, 1, False)
    return layer(name, f, params, c_out * hw, saved=saved, work=2 * c_in * hw_in)


def resnet(units, unit, preact):
    layers = [resnet_stem()]
    c_in, h = 64, 56
    for s, n in enumerate(units):
        c_out = 256 * 2 ** s
        for u in range(n):
            # The first unit of a stage changes the shape (projection shortcut).
            stride = 2 if (s > 0 and u == 0) else 1
            layers.append(unit(f"conv{s + 2}_x." + (str(u) if u else "proj"), c_in, c_out, h, stride))
            c_in, h = c_out, h // stride
    layers.append(resnet_head(c_in, h, preact=preact))
    return layers


# --- VGG-19 --------------------------------------------------------------------

def vgg19():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512, "M"]
    layers = []
    c_in, h = 3, 224
    i = 0
    while i < len(cfg):
        c = cfg[i]
        pool = i + 1 < len(cfg) and cfg[i + 1] == "M"
        f = conv_flops(c_in, c, 3, h, h)
        params = conv_params(c_in, c, 3, True)
        relu_out = c * h * h
        name = f"conv{len(layers) + 1}"
        if pool:  # ReLU output kept for the max pool's backward
            layers.append(layer(name, f, params, relu_out // 4, saved=relu_out, work=relu_out,
                                bwd=f if not layers else None))
            h //= 2
            i += 2
        else:
            layers.append(layer(name, f, params, relu_out, bwd=f if not layers else None))
            i += 1
        c_in = c
    # FC layers: fc6, fc7 with ReLU and dropout (1-byte masks as 1/4 of an
    # fp32 element, rounded up), fc8 with the softmax loss.
    n_in = 512 * 7 * 7
    for name, n_out in (("fc6", 4096), ("fc7", 4096)):
        layers.append(layer(name, 2 * n_in * n_out, n_in * n_out + n_out, n_out,
                            saved=n_out + (n_out + 3) // 4))
        n_in = n_out
    layers.append(layer("fc8", 2 * n_in * 1000, n_in * 1000 + 1000, 1000))
    return layers


# --- U-Net ---------------------------------------------------------------------

def unet():
    layers = []
    skips = {}  # level → elements of the skip tensor the decoder still needs

    def add(name, fwd, params, out, saved=0, work=0):
        # The chain's state after this stage: its tensor and the pending skips.
        layers.append(layer(name, fwd, params, out + sum(skips.values()), saved=saved, work=work,
                            bwd=fwd if not layers else None))

    def conv3(c_in, c_out, h_in):
        h = h_in - 2  # unpadded 3×3
        return conv_flops(c_in, c_out, 3, h, h), conv_params(c_in, c_out, 3, True), c_out * h * h, h

    c_in, h = 1, 572
    for lvl, c in enumerate([64, 128, 256, 512, 1024], start=1):
        name = f"down{lvl}" if lvl < 5 else "bottom"
        pooled = 0
        if lvl > 1:  # the stage starts with the 2×2 max pool of the previous level
            h //= 2
            pooled = c_in * h * h  # the pool's output: the conv's input, saved
        f, p, out, h = conv3(c_in, c, h)
        add(f"{name}.conv1", f, p, out, saved=pooled, work=pooled)
        f, p, out, h = conv3(c, c, h)
        if lvl < 5:
            skips[lvl] = out  # kept (whole; cropped when used) until its decoder level
        add(f"{name}.conv2", f, p, out - (out if lvl < 5 else 0))
        c_in = c
    for lvl in (4, 3, 2, 1):
        c = c_in // 2
        # 2×2 up-convolution (stride 2), then concatenation with the cropped skip.
        f = 2 * c_in * c * 4 * h * h
        p = c_in * c * 4 + c
        h *= 2
        up = c * h * h
        del skips[lvl]
        add(f"up{lvl}.upconv", f, p, 2 * up, work=up)
        f, p, out, h = conv3(2 * c, c, h)
        add(f"up{lvl}.conv1", f, p, out)
        f, p, out, h = conv3(c, c, h)
        add(f"up{lvl}.conv2", f, p, out)
        c_in = c
    # 1×1 conv to 2 classes, softmax loss (its output: the class probabilities).
    add("final", 2 * 64 * 2 * h * h, 64 * 2 + 2, 2 * h * h)
    return layers


PRESETS = {
    "resnet50": dict(
        layers=lambda: resnet([3, 4, 6, 3], bottleneck_v1, preact=False),
        input=3 * 224 * 224,
        source="He et al. 2016, Deep Residual Learning for Image Recognition, Table 1 (50-layer, "
               "bottleneck units [3, 4, 6, 3]); ImageNet 224x224; per-sample fp32 numbers derived "
               "by scripts/gen_chain_presets.py (formulas there)"),
    "resnet1001": dict(
        layers=lambda: resnet([83, 83, 83, 84], bottleneck_v2, preact=True),
        input=3 * 224 * 224,
        source="Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost, Sec. 5 (1,000-layer "
               "ImageNet ResNet, 224x224) with the pre-activation bottleneck units of He et al. 2016, "
               "Identity Mappings in Deep Residual Networks; 333 units over 4 stages [83, 83, 83, 84]; "
               "per-sample fp32 numbers derived by scripts/gen_chain_presets.py (formulas there)"),
    "vgg19": dict(
        layers=vgg19,
        input=3 * 224 * 224,
        source="Simonyan & Zisserman 2015, Very Deep Convolutional Networks, configuration E "
               "(VGG-19); ImageNet 224x224; per-sample fp32 numbers derived by "
               "scripts/gen_chain_presets.py (formulas there)"),
    "unet": dict(
        layers=unet,
        input=1 * 572 * 572,
        source="Ronneberger et al. 2015, U-Net, Fig. 1 (572x572 input, unpadded convs, 388x388x2 "
               "output); skip tensors ride in each stage's output until their decoder level; "
               "per-sample fp32 numbers derived by scripts/gen_chain_presets.py (formulas there)"),
}


def render(name, spec):
    layers = spec["layers"]()
    model = {"name": name, "source": spec["source"],
             "chain": {"input_bytes": spec["input"] * E, "layers": compress(layers)}}
    totals = (sum(l["params"] for l in layers), sum(l["fwd_flops"] for l in layers) / 2, len(layers))
    return json.dumps(model, indent=1) + "\n", totals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if a preset would change")
    args = ap.parse_args()
    stale = []
    for name, spec in PRESETS.items():
        text, (params, macs, stages) = render(name, spec)
        path = os.path.join(ROOT, "configs", "models", name + ".json")
        print(f"{name}: {stages} stages, {params / 1e6:.2f} M parameters, "
              f"{macs / 1e9:.2f} G multiply-adds per sample", file=sys.stderr)
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if args.check:
            stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        sys.exit("out of date (run scripts/gen_chain_presets.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
