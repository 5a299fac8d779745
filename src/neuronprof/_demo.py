"""``neuronprof demo``: run the case studies of ``examples/`` from an installed package.

The example scripts are the one source of truth: the wheel ships them as
``neuronprof/_examples/``, and a source checkout finds them in ``examples/`` at
the repository root. Each is loaded from its file and its ``main()`` called
with the remaining command-line arguments.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any, Literal, get_args

__all__ = ["DEMOS", "SUMMARIES", "Demo", "example_path", "run_demo"]

Demo = Literal["rmsnorm", "mlp", "attention"]
"""A case study of ``neuronprof demo``.

* ``"rmsnorm"``: RMSNorm naive vs ``torch.rms_norm`` vs ``torch.compile`` (``examples/rmsnorm.py``).
* ``"mlp"``: matmul + add vs ``nn.Linear``, then a three-layer MLP eager vs
  ``torch.compile`` (``examples/linear_mlp.py``).
* ``"attention"``: naive attention vs ``F.scaled_dot_product_attention`` vs
  ``torch.compile`` (``examples/attention.py``).
"""

DEMOS: tuple[str, ...] = get_args(Demo)

_FILES = {"rmsnorm": "rmsnorm.py", "mlp": "linear_mlp.py", "attention": "attention.py"}
SUMMARIES = {
    "rmsnorm": "RMSNorm: naive (6 ops) vs torch.rms_norm vs torch.compile",
    "mlp": "matmul + add vs nn.Linear; three-layer MLP eager vs torch.compile",
    "attention": "attention: naive softmax(QK^T/sqrt(d))V vs F.scaled_dot_product_attention vs torch.compile",
}
"""One line per case study, for ``neuronprof demo --help``."""


def _search_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent
    # Installed wheel first, then the repository root of a source or editable checkout.
    return [here / "_examples", here.parents[1] / "examples"]


def example_path(demo: str) -> Path:
    """Return the file of the example behind ``neuronprof demo <demo>``.

    Raises:
        ValueError: ``demo`` is not one of [`DEMOS`][neuronprof._demo.DEMOS].
        FileNotFoundError: The examples are neither installed with the package
            nor in a source checkout (a broken installation: reinstall neuronprof).
    """
    if demo not in _FILES:
        raise ValueError(f"unknown demo {demo!r}; choose one of: {', '.join(DEMOS)}")
    searched = [folder / _FILES[demo] for folder in _search_dirs()]
    for candidate in searched:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"the {demo!r} example was not found (looked for {', '.join(str(p) for p in searched)}); "
        "reinstall neuronprof: its wheel ships the examples"
    )


def run_demo(demo: str, argv: list[str], prog: str = "neuronprof demo") -> int:
    """Run one case study with ``argv`` as its command line; return its exit status.

    Raises:
        ValueError: Unknown demo.
        FileNotFoundError: The example file is missing.
    """
    path = example_path(demo)
    # A run name other than "__main__" keeps the script's own entry point from firing.
    namespace: dict[str, Any] = runpy.run_path(str(path), run_name=f"neuronprof_demo_{demo}")
    main = namespace.get("main")
    if not callable(main):
        raise RuntimeError(f"{path} defines no main(argv) function")
    return int(main(argv, prog=f"{prog} {demo}") or 0)
