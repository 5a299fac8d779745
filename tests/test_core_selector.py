"""``core`` follows the grammar of Neuron's ``capture_enabled_for_nc``, checked before anything starts.

The runtime's parser (as the TorchNeuron stand-in models it) takes comma-separated
indices and ranges; ``"all"`` is neuronprof's own word for "every core of the
process" and is never sent. Property: whatever ``parse_core`` accepts, the runtime
accepts too (or it is ``"all"``), and whatever the runtime accepts (with ranges
that do not run backwards) ``parse_core`` accepts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuronprof.backends.base import core_indices, cores_not_visible, parse_core

_RUNTIME = Path(__file__).resolve().parent / "backends" / "standins" / "torch_neuronx" / "_runtime.py"


def _runtime():  # type: ignore[no-untyped-def]
    # Loaded by path: importing the torch_neuronx package would register a device in this process.
    spec = importlib.util.spec_from_file_location("neuronprof_test_neuron_runtime", _RUNTIME)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


RUNTIME = _runtime()


def _runtime_accepts(text: str) -> bool:
    RUNTIME.reset()
    return RUNTIME.parse(f"capture_enabled_for_nc:{text}").rejected == []


@given(st.text(alphabet="0123456789,- al", max_size=12))
def test_parse_core_agrees_with_the_runtime_grammar(text: str) -> None:
    try:
        canonical = parse_core(text)
    except ValueError:
        canonical = None
    if canonical is not None and canonical != "all":
        assert _runtime_accepts(canonical), f"{text!r} -> {canonical!r} would be rejected by the runtime"
    if canonical is not None and canonical != "all":
        assert " " not in canonical
    if " " not in text and text and _runtime_accepts(text):
        backwards = any("-" in part and int(part.split("-")[0]) > int(part.split("-")[1]) for part in text.split(","))
        assert (canonical is not None) != backwards


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), min_size=1, max_size=5), st.integers(0, 24))
def test_core_indices_expand_ranges_in_order(parts: list[tuple[int, int]], count: int) -> None:
    text = ",".join(f"{lo}-{lo + span}" if span else str(lo) for lo, span in parts)
    expected = [i for lo, span in parts for i in range(lo, lo + span + 1) if i < count]
    assert core_indices(parse_core(text), count) == expected
    missing = cores_not_visible(parse_core(text), count)
    assert bool(missing) == any(lo + span >= count for lo, span in parts)
    assert core_indices(None, count) == core_indices("all", count) == list(range(count))


def test_huge_ranges_cost_nothing() -> None:
    assert core_indices(parse_core("0-999999999999"), 2) == [0, 1]
    assert cores_not_visible("1,3-999999999999", 2) == ["3-999999999999"]


@pytest.mark.parametrize("bad", ["all,0", "0-", "-1", "1,,2", "a", "5-2", "0 1", True, -1, 1.0])
def test_bad_cores_refused_before_anything_starts(bad: object) -> None:
    import neuronprof

    with pytest.raises(ValueError, match="core"):
        neuronprof.session(core=bad, backend="cpu")  # type: ignore[arg-type]
