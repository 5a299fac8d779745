"""Attention written three ways, measured side by side with ``neuronprof.compare``.

* **naive**: ``softmax(Q Kᵀ / √d) · V`` from basic ops (transpose, matmul,
  scale, softmax, matmul), materialising the full ``seq × seq`` score matrix;
* **F.scaled_dot_product_attention**: PyTorch's fused attention, one op;
* **torch.compile** of the naive function: one compiled region.

Run it on the best device available (neuron, tpu, cuda, else cpu)::

    python attention.py
    python attention.py --device cpu --seq 1024 --plot attention.png

or, from an installed neuronprof, ``neuronprof demo attention``. The first
``torch.compile`` takes 10-30 s on a small CPU.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Optional

import torch
import torch.nn.functional as F

import neuronprof


def attention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention from basic ops; the ``seq × seq`` scores go through memory twice."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention as PyTorch's fused op."""
    return F.scaled_dot_product_attention(q, k, v)


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


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """Return this example's command-line parser."""
    parser = argparse.ArgumentParser(prog=prog, description="Attention: naive vs SDPA vs torch.compile.")
    parser.add_argument("--device", help="torch device: neuron, tpu, cuda, cpu (default: best available)")
    parser.add_argument("--batch", type=int, default=4, help="batch size (default: 4)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default: 8)")
    parser.add_argument("--seq", type=int, default=512, help="sequence length (default: 512)")
    parser.add_argument("--head-dim", type=int, default=64, help="features per head (default: 64)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (default: 5)")
    parser.add_argument("--plot", metavar="PATH", help="also draw the comparison (.png or .svg)")
    parser.add_argument("--no-tables", action="store_true", help="print only the comparison, not each profile")
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Compare the three attentions and print the result; return the exit status."""
    args = build_parser(prog).parse_args(argv)
    for name in ("batch", "heads", "seq", "head_dim"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    device = args.device or best_device()
    dtype = getattr(torch, args.dtype)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(*shape, device=device, dtype=dtype) for _ in range(3))
    backend, core = profile_target(device)
    variants = {
        "naive": attention_naive,
        "F.scaled_dot_product_attention": attention_sdpa,
        "torch.compile": torch.compile(attention_naive, fullgraph=True, backend=compile_backend(device)),
    }
    print(f"attention over q, k, v of {shape} (batch, heads, seq, head_dim) {args.dtype} on {device}")
    with torch.no_grad():
        result = neuronprof.compare(variants, q, k, v, repeats=args.repeats, backend=backend, core=core)
    if not args.no_tables:
        for row in result:
            print(f"\n== {row.name} ==")
            print(row.table)
    print()
    print(result)
    if args.plot:
        print(f"\nplot written to {result.plot(args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
