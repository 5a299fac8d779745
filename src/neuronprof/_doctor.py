"""``neuronprof doctor``: what this environment can profile, and what to fix.

It is the first thing to run when a device column comes out empty; ``--probe``
profiles one tiny op on the device and says what actually reached torch.profiler.
"""

from __future__ import annotations

import glob
import platform
import tempfile
import warnings
from typing import Any, Literal

__all__ = ["PROBE_MEANINGS", "ProbeResult", "diagnose", "probe"]

ProbeResult = Literal["linked", "unlinked", "runtime", "nothing", "cpu"]
"""What a probe found in torch.profiler's output (see ``PROBE_MEANINGS``)."""

PROBE_MEANINGS: dict[str, str] = {
    "linked": "device kernels linked to ops: the device columns fill, on each op and on each kernel row.",
    "unlinked": "device kernels linked to no op: device time shows on the kernel rows only (totals count "
    "them); the ops that launched them carry none.",
    "runtime": "device runtime events only (filed by torch as CPU rows): no device time reaches torch.profiler. "
    "On TorchNeuron without correlate_device_time this is normal: NeuronCore time is in Neuron's own profile "
    "(s.export(format='neuron')).",
    "nothing": "nothing from the device reached torch.profiler: its profiler plugin is not loaded, or the op "
    "did not run on the device.",
    "cpu": "CPU only: no device to probe.",
}
"""One-line meaning of each probe result."""

# Device files that each backend's driver creates: where one exists, the machine has that
# device, and doctor says how to install the backend's package even when not asked.
_DEVICE_FILES: dict[str, tuple[str, ...]] = {
    "neuron": ("/dev/neuron[0-9]*",),  # the Neuron driver's devices (Trainium, Inferentia)
    "tpu": ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*"),  # a Cloud TPU VM's chips
    "cuda": ("/dev/nvidia[0-9]*",),  # the NVIDIA driver's GPUs
}
# The parts of an unavailable backend's reason that say what to install.
_MISSING = (" is not installed; ", " is a CPU-only build; ")


def _has_device(name: str) -> bool:
    """Whether this machine has the device of backend ``name`` (its driver's device files exist)."""
    return any(glob.glob(pattern) for pattern in _DEVICE_FILES.get(name, ()))


def _reason_for(name: str, reason: str, asked: str) -> str:
    """``reason`` as doctor prints it: how to install the backend only when asked about it or its device is here."""
    if name == asked or _has_device(name):
        return reason
    for marker in _MISSING:
        head, found, _ = reason.partition(marker)
        if found:
            return f"{head}{found.rstrip('; ')}"
    return reason


def diagnose(backend: str = "auto") -> dict[str, Any]:
    """Collect the facts ``neuronprof doctor`` prints, as a JSON-ready dict.

    An unavailable backend's reason says how to install it only for the backend asked
    about (``backend``, ``neuronprof doctor --backend neuron``) or one whose device this
    machine has; on a laptop, doctor does not suggest installing TorchNeuron.

    Args:
        backend: The backend asked about; ``"auto"`` for none in particular.

    Returns:
        Keys ``python``, ``torch``, ``kineto``, ``privateuse1``, ``activities``,
        ``backends`` (each with ``available`` and a ``reason`` when not), ``auto``,
        ``neuron_build`` (``"correlating"``, ``"beta"``, ``"documented"`` or ``"legacy"``, and
        ``neuron_version``, ``torch_neuronx.__version__``, when
        TorchNeuron is available) and ``problems`` (a list of one-line hints).
    """
    from neuronprof import __version__

    facts: dict[str, Any] = {"neuronprof": __version__, "python": platform.python_version(), "problems": []}
    problems: list[str] = facts["problems"]
    try:
        import torch
        import torch.profiler
    except ImportError as exc:
        facts["torch"] = None
        problems.append(f"torch is not importable ({exc}): pip install torch")
        return facts

    from neuronprof.backends import auto_choice, describe_backends, get_backend
    from neuronprof.backends.base import privateuse1_name
    from neuronprof.backends.privateuse1 import PrivateUse1Backend

    facts["torch"] = torch.__version__
    facts["kineto"] = bool(torch.autograd.kineto_available())
    if not facts["kineto"]:
        problems.append("this torch build has no kineto: device activity cannot be profiled; install an official build")
    pu1 = privateuse1_name()
    facts["privateuse1"] = pu1
    supported = torch.profiler.supported_activities()
    # A renamed PrivateUse1 activity prints under the backend's name ("MYDEV").
    facts["activities"] = sorted(
        "PrivateUse1" + (f" ({pu1.upper()})" if pu1 else "")
        if a == torch.profiler.ProfilerActivity.PrivateUse1
        else str(a).split(".")[-1]
        for a in supported
    )
    facts["backends"] = describe_backends()
    for info in facts["backends"]:
        if not info["available"] and isinstance(info["reason"], str):
            info["reason"] = _reason_for(str(info["name"]), info["reason"], backend)
    facts["auto"] = auto_choice()
    if pu1 is not None:
        pu1_backend = get_backend(pu1)
        # Each backend states its own torch requirement (TorchNeuron has none; TorchTPU needs 2.12).
        problem = pu1_backend.torch_problem() if isinstance(pu1_backend, PrivateUse1Backend) else None
        if problem:
            problems.append(problem)
        # Whether the plugin delivers anything cannot be told from the activity list
        # (torch lists PrivateUse1 once the device is renamed): only a probe can.
        problems.append(f"run `neuronprof doctor --probe` to see what the {pu1} profiler plugin delivers")
    for info in facts["backends"]:
        if not info["available"] and info["name"] != "cpu" and (backend == info["name"] or _has_device(info["name"])):
            problems.append(f"{info['name']}: {info['reason']}")
        if info["name"] == "neuron" and info["available"]:
            from neuronprof.backends import NeuronBackend

            neuron = get_backend("neuron")
            refusal = neuron.refusal()
            if refusal:
                problems.append(f"neuron: {refusal}")
            if isinstance(neuron, NeuronBackend):
                facts["neuron_build"] = build = neuron.build()
                if build == "legacy":
                    problems.append(
                        "neuron: this TorchNeuron build has the legacy profiling API (no NeuronConfig), so the "
                        "NEURON column stays empty by design; NeuronCore time is in s.export(format='neuron'). "
                        "To see it in the table, upgrade to the TorchNeuron of AWS's 2026 profiling article, "
                        "which correlates NeuronCore time with ops"
                    )
                elif build != "correlating":
                    which = f"(the public beta, torch-neuronx {neuron.version()}) " if build == "beta" else ""
                    problems.append(
                        f"neuron: this TorchNeuron build {which}has a NeuronConfig without correlate_device_time, so "
                        "the NEURON column stays empty by design; NeuronCore time is in s.export(format='neuron')"
                    )
                facts["neuron_version"] = neuron.version()
                pairing = neuron.torch_pairing_problem()
                if pairing:
                    problems.append(f"neuron: {pairing}")
    if facts["auto"] == "cpu":
        from neuronprof.backends import installed_but_unusable

        unusable = [u for u in (installed_but_unusable(get_backend(i["name"])) for i in facts["backends"]) if u]
        if unusable:
            problems += [f"{u}; until then sessions profile the CPU only (no device columns)" for u in unusable]
        else:
            problems.append(
                "no accelerator found: sessions will profile the CPU only (no device columns); "
                "`neuronprof doctor --backend neuron` (or tpu, cuda) says how to install a backend"
            )
    return facts


def probe(backend: str = "auto") -> dict[str, Any]:
    """Profile one tiny op on the backend's device and say what reached torch.profiler.

    The op (``x + 1`` then ``x.sum()`` on a 64-element tensor) runs inside a
    one-step neuronprof session on the chosen backend, with the ``device`` and
    ``runtime`` modes. The tensor is placed on the device; when that is not
    possible the op runs on the CPU and ``placed`` says why. A backend without a
    device (the CPU) is not probed: the result is ``"cpu"``.

    Args:
        backend: ``"auto"`` or a backend name, as for [`neuronprof.session`][neuronprof.session].

    Returns:
        Keys ``backend``, ``placed`` (the device the op ran on, or ``"cpu (...)"``),
        ``result`` (a ``ProbeResult``), ``meaning``
        (its one-line explanation), ``kernels`` (device kernel rows), ``linked_ops``
        (ops carrying device time), ``runtime_events`` and ``notes`` (the session's).

    Raises:
        BackendUnavailableError: The named backend cannot run here.
    """
    import torch

    from neuronprof._session import session
    from neuronprof._vocabulary import K_RUNTIME
    from neuronprof.backends import resolve_backend

    chosen, _ = resolve_backend(backend)
    if chosen.device_label is None:
        # Nothing to ask a device plugin: say so, without a session's mode notes.
        return {
            "backend": chosen.name,
            "placed": "cpu",
            "result": "cpu",
            "meaning": PROBE_MEANINGS["cpu"],
            "kernels": [],
            "linked_ops": [],
            "runtime_events": 0,
            "notes": [],
        }
    with tempfile.TemporaryDirectory(prefix="neuronprof-probe-") as tmp:
        s = session(("device", "runtime"), backend=backend, wait=0, warmup=1, active=1, output_dir=tmp)
        device = s.backend
        placed = device
        try:
            x = torch.ones(64, device=device)
        except Exception as exc:  # no allocator, no device visible...: probe the plugin on the CPU
            first = str(exc).splitlines()[0] if str(exc) else ""
            placed = f"cpu, not {device} ({type(exc).__name__}: {first[:100]})"
            x = torch.ones(64)
        with s:
            for _ in s.steps():
                (x + 1).sum()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = s.table(row_limit=None)
        # Runtime and driver calls, as the vocabulary tells them (the record's events, read once).
        runtime = sum(
            1
            for events in s.recording.event_tables
            for _, lane, _ in events.timelines()
            for kid in lane.kid
            if events.keys.kind[kid] == K_RUNTIME
        )
    kernels = [r.name for r in table.rows if r.on_device and (r.self_device_us or 0) > 0]
    linked = [r.name for r in table.rows if not r.on_device and (r.self_device_us or 0) > 0]
    result: ProbeResult
    if kernels and linked:
        result = "linked"
    elif kernels:
        result = "unlinked"
    elif runtime:
        result = "runtime"
    else:
        result = "nothing"
    return {
        "backend": s.backend,
        "placed": placed,
        "result": result,
        "meaning": PROBE_MEANINGS[result],
        "kernels": kernels,
        "linked_ops": linked,
        "runtime_events": runtime,
        # Not the hint to run --probe (this is it), the empty-column warning (the result says
        # it better), or notes naming the probe's temporary folder (deleted by now).
        "notes": [n for n in s.notes if "doctor --probe" not in n and tmp not in n],
    }
