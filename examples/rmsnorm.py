"""RMSNorm written three ways, measured side by side with ``neuronprof.compare``.

* **naive**: square, mean, ``+ eps``, rsqrt, ``× x``, ``× weight``: six aten ops
  (``aten::pow``, ``aten::mean``, ``aten::add``, ``aten::rsqrt``, ``aten::mul`` ×2),
  each a full pass over the tensor;
* **torch.rms_norm**: one op;
* **torch.compile** of the naive function: one compiled region
  (``backend="neuron"`` on Trainium, the default Inductor elsewhere).

Hugging Face's blog post "Profiling TorchNeuron (Part 1): System-level profiling on
AWS Trainium" (AWS, 2026) reports, from one example run on one Trainium (not a
benchmark) with a TorchNeuron build whose ``NeuronConfig`` accepts
``correlate_device_time``: naive RMSNorm at 2355 µs Self NEURON over 6 op calls,
``torch.rms_norm`` at 403 µs, ``torch.compile`` at 376 µs. Those are the article's
figures, not this project's measurements. On Trainium this script runs the same experiment; only such a build
fills the Self NEURON column (on the others it stays empty and NeuronCore time is in
``s.export(format="neuron")``), and your figures depend on the instance, the build and
the shape.

Run it on the best device available (neuron, tpu, cuda, else cpu)::

    python rmsnorm.py
    python rmsnorm.py --device cpu --shape 1024x4096 --plot rmsnorm.png

or, from an installed neuronprof, ``neuronprof demo rmsnorm``. The first
``torch.compile`` takes 10-20 s on a small CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Optional

import torch

import neuronprof

EPS = 1e-6


def rmsnorm_naive(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm from basic ops: six kernels, six trips through memory."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def rmsnorm_fused(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm as PyTorch's single op."""
    return torch.rms_norm(x, (x.shape[-1],), weight, EPS)


def best_device() -> str:
    """Return the device neuronprof would profile: ``neuron``, ``tpu``, ``cuda``, else ``cpu``."""
    backend, _ = neuronprof.backends.resolve_backend("auto")
    return backend.name if backend.name in ("neuron", "tpu", "cuda") else "cpu"


def profile_target(device: str) -> tuple[str, Optional[str]]:
    """Return the neuronprof backend and core that profile ``device``: ``"cuda:1"`` → ``("cuda", "1")``."""
    dev = torch.device(device)
    return dev.type, None if dev.index is None else str(dev.index)


def compile_backend(device: str) -> str:
    """Return the ``torch.compile`` backend for ``device``: ``"neuron"`` on Trainium, else Inductor."""
    return "neuron" if torch.device(device).type == "neuron" else "inductor"


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``"4096x4096"`` (or ``"8,128,4096"``) into a shape."""
    try:
        shape = tuple(int(d) for d in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid shape {text!r}: write it like 4096x4096") from None
    if not shape or any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"invalid shape {text!r}: every size must be positive")
    return shape


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """Return this example's command-line parser."""
    parser = argparse.ArgumentParser(prog=prog, description="RMSNorm: naive vs torch.rms_norm vs torch.compile.")
    parser.add_argument("--device", help="torch device: neuron, tpu, cuda, cpu (default: best available)")
    parser.add_argument("--shape", type=parse_shape, default=(2048, 2048), help="input shape (default: 2048x2048)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (default: 5)")
    parser.add_argument("--plot", metavar="PATH", help="also draw the comparison (.png or .svg)")
    parser.add_argument("--no-tables", action="store_true", help="print only the comparison, not each profile")
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Compare the three RMSNorms and print the result; return the exit status."""
    args = build_parser(prog).parse_args(argv)
    device = args.device or best_device()
    dtype = getattr(torch, args.dtype)
    x = torch.randn(*args.shape, device=device, dtype=dtype)
    weight = torch.randn(args.shape[-1], device=device, dtype=dtype)
    backend, core = profile_target(device)
    variants = {
        "naive": rmsnorm_naive,
        "torch.rms_norm": rmsnorm_fused,
        "torch.compile": torch.compile(rmsnorm_naive, fullgraph=True, backend=compile_backend(device)),
    }
    print(f"RMSNorm over {tuple(args.shape)} {args.dtype} on {device}")
    with torch.no_grad():
        result = neuronprof.compare(variants, x, weight, repeats=args.repeats, backend=backend, core=core)
    if not args.no_tables:
        for row in result:
            print(f"\n== {row.name} ==")
            print(row.table)
            # What to fix first: for the naive variant, the unfused chain of six ops
            # (and, on a device, the host-to-device copy of eps made by aten::add).
            print(f"\n== {row.name}: what to fix first ==")
            print(row.insights)
    print()
    print(result)
    if args.plot:
        print(f"\nplot written to {result.plot(args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
