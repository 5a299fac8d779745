"""From one linear layer to a fused MLP, measured with ``neuronprof.compare``.

Two comparisons:

1. **A linear layer**: ``x @ Wᵀ + b`` written as a matmul and an add (two ops,
   the bias added in a second pass over the output) against ``nn.Linear``, whose
   ``aten::linear`` folds the bias into the matrix multiply (one op).
2. **A three-layer MLP** (``Linear → GELU → Linear → GELU → Linear``, five ops
   per call) run eagerly against ``torch.compile`` of the same module (one
   compiled region, the activations fused into the matmuls' epilogues).

Run it on the best device available (neuron, tpu, cuda, else cpu)::

    python linear_mlp.py
    python linear_mlp.py --device cpu --tokens 512 --dim 1024 --plot mlp.png

or, from an installed neuronprof, ``neuronprof demo mlp``. The first
``torch.compile`` takes 10-30 s on a small CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import torch
from torch import nn

import neuronprof


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


def make_mlp(dim: int, hidden: int) -> nn.Module:
    """Return a three-layer MLP: ``dim → hidden → hidden → dim`` with GELUs between."""
    return nn.Sequential(
        nn.Linear(dim, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, dim),
    )


def plot_path(path: str, suffix: str) -> Path:
    """Return ``path`` with ``-suffix`` added to its name: ``mlp.png`` → ``mlp-linear.png``."""
    p = Path(path)
    return p.with_name(f"{p.stem}-{suffix}{p.suffix}")


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """Return this example's command-line parser."""
    parser = argparse.ArgumentParser(prog=prog, description="nn.Linear and a three-layer MLP: eager vs fused.")
    parser.add_argument("--device", help="torch device: neuron, tpu, cuda, cpu (default: best available)")
    parser.add_argument("--tokens", type=int, default=256, help="rows of the input (default: 256)")
    parser.add_argument("--dim", type=int, default=512, help="input and output features (default: 512)")
    parser.add_argument("--hidden", type=int, default=2048, help="hidden features (default: 2048)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (default: 5)")
    parser.add_argument(
        "--plot", metavar="PATH", help="also draw both comparisons: PATH-linear.png and PATH-mlp.png (.png or .svg)"
    )
    parser.add_argument("--no-tables", action="store_true", help="print only the comparisons, not each profile")
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Run both comparisons and print them; return the exit status."""
    args = build_parser(prog).parse_args(argv)
    for name in ("tokens", "dim", "hidden"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name} must be positive")
    device = args.device or best_device()
    dtype = getattr(torch, args.dtype)
    backend, core = profile_target(device)
    x = torch.randn(args.tokens, args.dim, device=device, dtype=dtype)

    linear = nn.Linear(args.dim, args.hidden).to(device=device, dtype=dtype)
    # Transposed once, outside the measured code, so that the naive variant is
    # exactly two ops: the matmul and the bias add.
    weight_t = linear.weight.detach().t()
    bias = linear.bias.detach()

    def matmul_add(x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, weight_t) + bias

    mlp = make_mlp(args.dim, args.hidden).to(device=device, dtype=dtype).eval()
    compiled_mlp = torch.compile(mlp, fullgraph=True, backend=compile_backend(device))

    print(f"x: {tuple(x.shape)} {args.dtype} on {device}; hidden {args.hidden}")
    with torch.no_grad():
        layer_variants = {"matmul + add": matmul_add, "nn.Linear": linear}
        layer = neuronprof.compare(layer_variants, x, repeats=args.repeats, backend=backend, core=core)
        mlp_variants = {"eager": mlp, "torch.compile": compiled_mlp}
        block = neuronprof.compare(mlp_variants, x, repeats=args.repeats, backend=backend, core=core)

    for title, result in (("One linear layer", layer), ("Three-layer MLP", block)):
        if not args.no_tables:
            for row in result:
                print(f"\n== {title}, {row.name} ==")
                print(row.table)
        print(f"\n== {title} ==")
        print(result)
    if args.plot:
        for suffix, result in (("linear", layer), ("mlp", block)):
            print(f"plot written to {result.plot(plot_path(args.plot, suffix))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
