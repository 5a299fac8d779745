"""The small workload the backend tests profile, for snippets run by ``run_in_subprocess``.

Import it inside a snippet (``tests/backends`` is on the subprocess's ``PYTHONPATH``),
after the backend is loaded: ``from workload import profile_linear``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

import neuronprof


def profile_linear(out: Any, backend: str, **kw: Any) -> tuple[Any, Any, list[warnings.WarningMessage]]:
    """Profile ``Linear(16, 16) → relu → sum`` in a session; return the session, its table and the warnings.

    Args:
        out: The session's ``output_dir``.
        backend: The session's ``backend``.
        **kw: Any other ``neuronprof.session`` option.

    Returns:
        ``(session, s.table(row_limit=None), warnings caught during the session and the table)``.
    """
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuronprof.session(output_dir=out, backend=backend, **kw) as s:
            for _ in s.steps():
                lin(x).relu().sum()
        t = s.table(row_limit=None)
    return s, t, caught
