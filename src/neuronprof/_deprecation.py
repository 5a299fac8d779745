"""Old keyword names that still work, with a ``DeprecationWarning`` that names the new one.

One word per idea across the API: where a public function once spelled an
option differently (``limit`` where torch.profiler says ``row_limit``), the old
keyword is accepted here and passed on under the new name.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def renamed_keyword(old: str, new: str) -> Callable[[F], F]:
    """Accept keyword ``old`` as ``new``, warning that ``old`` is deprecated.

    Raises:
        TypeError: Both ``old`` and ``new`` were given.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                # A method is named by the class it was called on (Table.to_text), not the base defining it.
                own = args and getattr(type(args[0]), fn.__name__, None) is wrapper
                called = f"{type(args[0]).__name__}.{fn.__name__}" if own else fn.__qualname__
                if new in kwargs:
                    raise TypeError(f"{called}() got both {old}= and {new}=; pass only {new}=")
                warnings.warn(
                    f"{called}({old}=...) is deprecated; use {new}=... (the same meaning)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
