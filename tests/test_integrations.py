"""neuronprof inside Hugging Face Trainer and Lightning: a few real training steps on the CPU.

Tiny models built from a config (no download); each run leaves a trace, a table and
an HTML report per rank in its output folder. The libraries come with the ``dev``
extra; where one is missing its tests are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof.analysis import load_trace
from neuronprof.cli import main as analysis_main
from neuronprof.errors import NeuronProfWarning

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def check_outputs(folder: Path, outputs: dict[str, Path], *, steps: int) -> None:
    """The three files of rank 0, each readable by the tools that read them."""
    assert sorted(p.name for p in folder.iterdir()) == ["rank-0.html", "rank-0.json.gz", "rank-0.table.txt"]
    assert outputs == {
        "trace": folder / "rank-0.json.gz",
        "table": folder / "rank-0.table.txt",
        "report": folder / "rank-0.html",
    }
    trace = load_trace(outputs["trace"])
    assert trace.steps == steps
    table = outputs["table"].read_text(encoding="utf-8")
    assert "aten::mm" in table and f"{steps} profiled step{'s' if steps != 1 else ''}" in table
    page = outputs["report"].read_text(encoding="utf-8")
    assert 'id="ops"' in page and 'id="timeline"' in page and 'id="findings"' in page
    # The folder is a multi-rank folder for the offline commands.
    assert analysis_main(["summarize", str(folder), "--row-limit", "3"]) == 0


def calls(trace: Any, prefix: str) -> int:
    return sum(op.calls for op in trace.ops if op.name.startswith(prefix))


# -- Hugging Face Transformers ------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> Any:
    return pytest.importorskip("transformers", reason="transformers is not installed (the dev extra brings it)")


def tiny_gpt2(hf: Any) -> Any:
    torch.manual_seed(0)
    config = hf.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    return hf.GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def hf_train(hf: Any, out: Path, callback: Any, *, max_steps: int, accumulation: int = 1) -> None:
    args = hf.TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulation,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    hf.Trainer(model=tiny_gpt2(hf), args=args, train_dataset=Tokens(), callbacks=[callback]).train()


@pytest.mark.slow
def test_trainer_callback_writes_trace_table_and_report_per_rank(hf: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.transformers import ProfileCallback

    callback = ProfileCallback(wait=1, warmup=1, active=2, record_shapes=True)
    hf_train(hf, tmp_path, callback, max_steps=6, accumulation=2)
    folder = tmp_path / "neuronprof"
    check_outputs(folder, callback.outputs, steps=2)
    trace = load_trace(callback.outputs["trace"])
    # One profiled step is one optimizer step: 2 steps hold 2 AdamW updates, and with
    # gradient accumulation 2, 4 forward passes (GPT-2 embeds tokens and positions: 2 lookups each).
    assert calls(trace, "Optimizer.step#AdamW.step") == 2
    assert calls(trace, "aten::embedding") - calls(trace, "aten::embedding_") == 8
    # The session it ran is there for more (the findings, a roofline...).
    assert callback.session.insights().steps == 2
    assert callback.session.backend == "cpu"


@pytest.mark.slow
def test_trainer_shorter_than_the_schedule_keeps_going_and_frees_the_profiler(hf: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.transformers import ProfileCallback

    callback = ProfileCallback(wait=2, warmup=1, active=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf_train(hf, tmp_path, callback, max_steps=2)
    assert callback.outputs == {}
    assert any(issubclass(w.category, NeuronProfWarning) and "only 2 completed" in str(w.message) for w in caught)
    # The process-wide profiler was released: another session can run.
    with neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path) as s:
        torch.ones(2) + 1
    assert s.table().steps == 1


def test_trainer_callback_names_its_files_after_the_process_index(hf: Any, tmp_path: Path) -> None:
    """Under torchrun each Trainer process has its own process_index; its files carry it."""
    from types import SimpleNamespace

    from neuronprof.integrations.transformers import ProfileCallback

    callback = ProfileCallback(wait=0, warmup=0, active=2)
    args = SimpleNamespace(output_dir=str(tmp_path), process_index=3, device=torch.device("cpu"))
    model = torch.nn.Linear(8, 8)
    callback.on_train_begin(args, None, None, model=model)
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
        callback.on_step_end(args, None, None)
    assert sorted(p.name for p in (tmp_path / "neuronprof").iterdir()) == [
        "rank-3.html",
        "rank-3.json.gz",
        "rank-3.table.txt",
    ]
    callback.on_train_end(args, None, None)  # after the schedule: nothing more to do
    assert load_trace(callback.outputs["trace"]).steps == 2


def test_trainer_callback_checks_its_options_before_training(hf: Any) -> None:
    from neuronprof.integrations.transformers import ProfileCallback

    with pytest.raises(ValueError, match="active must be at least 1"):
        ProfileCallback(active=0)
    with pytest.raises(ValueError, match="unknown mode"):
        ProfileCallback(modes=("nonsense",))
    with pytest.raises(TypeError):
        ProfileCallback(not_an_option=1)
    with pytest.raises(TypeError, match="output_dir"):
        from neuronprof.integrations import StepDriver

        StepDriver(output_dir="x")


# -- Lightning ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pl() -> Any:
    return pytest.importorskip("lightning.pytorch", reason="lightning is not installed (the dev extra brings it)")


def lightning_fit(pl: Any, root: Path, profiler: Any, *, max_steps: int, logger: bool = False) -> Any:
    class Regressor(pl.LightningModule):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        profiler=profiler,
        default_root_dir=str(root),
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=8))
    return trainer


@pytest.mark.slow
def test_lightning_profiler_writes_trace_table_and_report_per_rank(pl: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.lightning import NeuronProfProfiler

    profiler = NeuronProfProfiler(wait=1, warmup=1, active=2)
    trainer = lightning_fit(pl, tmp_path, profiler, max_steps=6, logger=True)
    # Lightning's log_dir (lightning_logs/version_0) is the default folder.
    folder = Path(trainer.log_dir) / "neuronprof"
    assert folder.parent != tmp_path
    check_outputs(folder, profiler.outputs, steps=2)
    trace = load_trace(profiler.outputs["trace"])
    # One profiled step is one training batch: forward, backward and optimizer step.
    assert calls(trace, "Optimizer.step#SGD.step") == 2
    assert calls(trace, "aten::mse_loss") - calls(trace, "aten::mse_loss_") == 2
    assert "aten::mm" in profiler.summary()


@pytest.mark.slow
def test_lightning_profiler_dirpath_and_a_short_run(pl: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.lightning import NeuronProfProfiler

    profiler = NeuronProfProfiler(dirpath=tmp_path / "prof", wait=0, warmup=0, active=1)
    lightning_fit(pl, tmp_path, profiler, max_steps=3)
    check_outputs(tmp_path / "prof" / "neuronprof", profiler.outputs, steps=1)

    short = NeuronProfProfiler(dirpath=tmp_path / "short", wait=5, warmup=1, active=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronProfWarning)
        lightning_fit(pl, tmp_path, short, max_steps=2)
    assert short.outputs == {} and not (tmp_path / "short" / "neuronprof").exists()
    with pytest.raises(ValueError, match="unknown mode"):
        NeuronProfProfiler(modes=("nonsense",))


# -- the libraries are optional ------------------------------------------------------------

_BLOCKED = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, _Block())
import neuronprof, neuronprof.integrations
try:
    import neuronprof.integrations.{module}
except ImportError as exc:
    print(exc)
else:
    raise SystemExit("imported without {module}")
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("transformers", ("transformers",), "neuronprof[transformers]"),
        ("lightning", ("lightning", "pytorch_lightning"), "neuronprof[lightning]"),
    ],
)
def test_a_missing_library_names_the_extra(module: str, blocked: tuple[str, ...], extra: str) -> None:
    code = textwrap.dedent(_BLOCKED.format(module=module, blocked=set(blocked)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert extra in proc.stdout


def test_neuronprof_imports_no_training_library() -> None:
    code = (
        "import sys, neuronprof, neuronprof.integrations; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('transformers', 'lightning', 'pytorch_lightning', 'accelerate')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# -- on a device backend (the PrivateUse1 test plugin standing in for TorchNeuron) ---------

_NEURON_TRAINER = """
import os, torch
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from neuronprof.integrations._common import backend_for
from neuronprof.integrations.transformers import ProfileCallback

# Accelerate (under the Trainer) frees device memory through torch.neuron.empty_cache(),
# which the stand-in module does not define.
if not hasattr(torch.neuron, "empty_cache"):
    torch.neuron.empty_cache = lambda: None

class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,))
        return {"input_ids": ids, "labels": ids}

model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                   bos_token_id=0, eos_token_id=0))
out = os.environ["TRAINER_OUT"]
callback = ProfileCallback(backend="neuron", wait=0, warmup=1, active=1)
args = TrainingArguments(output_dir=out, max_steps=3, per_device_train_batch_size=4, report_to=[], use_cpu=True,
                         save_strategy="no", logging_strategy="no", disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback]).train()
report({"outputs": {k: str(v) for k, v in callback.outputs.items()},
        "backend": callback.session.backend,
        "auto": [backend_for(torch.device("neuron")), backend_for(torch.device("cpu")), backend_for("meta")]})
"""


@pytest.mark.slow
def test_trainer_callback_on_the_neuron_backend(hf: Any, tmp_path: Path) -> None:
    from run_in_subprocess import check, result, run_script  # noqa: I001 (tests/backends is on sys.path)

    # The correlating TorchNeuron build: the one that puts NeuronCore time into torch.profiler.
    env = {"TRAINER_OUT": str(tmp_path), "NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    proc = run_script(_NEURON_TRAINER, backend="neuron", env=env, cwd=tmp_path)
    data = result(check(proc))
    assert data["backend"] == "neuron"
    # A model the Trainer placed on TorchNeuron's device selects the neuron backend by itself.
    assert data["auto"] == ["neuron", "cpu", "auto"]
    outputs = {k: Path(v) for k, v in data["outputs"].items()}
    assert outputs["trace"].parent == tmp_path / "neuronprof"
    assert "Self NEURON (µs)" in outputs["table"].read_text(encoding="utf-8")
    page = outputs["report"].read_text(encoding="utf-8")
    assert "NEURON · lane 0" in page and "Self NEURON (µs)" in page


# -- a crash during training ends the session ----------------------------------------------


class Failing(Tokens):
    """A dataset whose sixth read (in the third batch of 2) raises, whatever the sampler's order."""

    def __init__(self) -> None:
        self.reads = 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.reads += 1
        if self.reads == 6:
            raise RuntimeError("bad sample")
        return super().__getitem__(i)


def _six_quiet_steps(hf: Any, tmp_path: Path) -> Any:
    """Trainer arguments of six steps on the CPU, two samples a batch, nothing saved, logged or shown."""
    return hf.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )


@pytest.mark.slow
def test_trainer_crash_then_close_frees_the_profiler_and_keeps_the_record(hf: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.transformers import ProfileCallback

    callback = ProfileCallback(wait=0, warmup=0, active=5)
    args = _six_quiet_steps(hf, tmp_path)
    trainer = hf.Trainer(model=tiny_gpt2(hf), args=args, train_dataset=Failing(), callbacks=[callback])
    with pytest.raises(RuntimeError, match="bad sample"):
        trainer.train()
    assert callback.session is not None
    outputs = callback.close()
    assert outputs["trace"].exists() and callback.close() == outputs
    with neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path / "next") as s:
        torch.ones(2) + 1
    assert s.table().steps == 1


@pytest.mark.slow
def test_trainer_callback_as_a_context_manager_ends_the_session(hf: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.transformers import ProfileCallback

    args = _six_quiet_steps(hf, tmp_path)
    with pytest.raises(RuntimeError, match="bad sample"):
        with ProfileCallback(wait=0, warmup=0, active=5) as callback:
            hf.Trainer(model=tiny_gpt2(hf), args=args, train_dataset=Failing(), callbacks=[callback]).train()
    with neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path / "next"):
        torch.ones(2) + 1


@pytest.mark.slow
def test_lightning_crash_in_training_step_ends_the_session(pl: Any, tmp_path: Path) -> None:
    from neuronprof.integrations.lightning import NeuronProfProfiler

    class Crashing(pl.LightningModule):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(16, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 3:
                raise RuntimeError("bad batch")
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    profiler = NeuronProfProfiler(dirpath=tmp_path, wait=0, warmup=0, active=6)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    trainer = pl.Trainer(
        max_steps=8,
        accelerator="cpu",
        devices=1,
        profiler=profiler,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(RuntimeError, match="bad batch"):
        trainer.fit(Crashing(), torch.utils.data.DataLoader(data, batch_size=8))
    # Ended by the exception itself, with the three finished batches written.
    assert not profiler._driver.running
    assert profiler.outputs["trace"].exists()
    assert profiler.close() == profiler.outputs
    with neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path / "next") as s:
        torch.ones(2) + 1
    assert s.table().steps == 1


# -- a run shorter than the schedule -------------------------------------------------------


@pytest.mark.slow
def test_trainer_shorter_than_the_schedule_records_no_wind_down_step(hf: Any, tmp_path: Path) -> None:
    """The step the last step() opens holds only the Trainer's wind-down: it is not a profiled step."""
    from neuronprof.integrations.transformers import ProfileCallback

    callback = ProfileCallback(wait=0, warmup=0, active=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf_train(hf, tmp_path, callback, max_steps=2)
    messages = [str(w.message) for w in caught if issubclass(w.category, NeuronProfWarning)]
    assert any("2 recorded step(s) are kept" in m for m in messages), messages
    table = callback.outputs["table"].read_text(encoding="utf-8")
    assert "2 profiled steps" in table and callback.session.table().steps == 2
    trace = load_trace(callback.outputs["trace"])
    assert calls(trace, "Optimizer.step#AdamW.step") == 2
    # The session ended in the last step's on_step_end: no wind-down op was recorded.
    assert calls(trace, "aten::embedding") - calls(trace, "aten::embedding_") == 4


@pytest.mark.parametrize("steps", [2, 3])
def test_nothing_recorded_writes_no_files(steps: int, tmp_path: Path, caplog: Any) -> None:
    """Training that ends within wait + warmup writes nothing, even if the next step was opened."""
    from neuronprof.integrations import StepDriver

    driver = StepDriver(wait=2, warmup=1, active=3)
    driver.begin(tmp_path, rank=0)
    for _ in range(steps):
        torch.randn(8, 8) @ torch.randn(8, 8)
        driver.step()
    torch.ones(3) + 1  # the training tool's wind-down, in the step the last step() opened
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert driver.finish() == {}
    assert any("nothing was recorded" in str(w.message) for w in caught)
    assert "no files written" in caplog.text or steps == 2
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


_TWO_RANKS = """
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from neuronprof.integrations.transformers import ProfileCallback


def run(rank, out):
    dist.init_process_group("gloo", init_method="file://" + out + "/store", rank=rank, world_size=2)
    callback = ProfileCallback(wait=0, warmup=0, active=1)
    # A process group set up by hand: the Trainer's process_index stays 0 on both ranks.
    args = SimpleNamespace(output_dir=out, process_index=0, device=torch.device("cpu"))
    model = torch.nn.Linear(8, 8)
    callback.on_train_begin(args, None, None, model=model)
    model(torch.randn(4, 8)).sum().backward()
    callback.on_step_end(args, None, None)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1],), nprocs=2)
"""


@pytest.mark.slow
def test_trainer_callback_takes_the_rank_of_an_initialised_process_group(hf: Any, tmp_path: Path) -> None:
    """process_index 0 on both ranks of a gloo group: each rank writes its own files, not two rank-0 sets."""
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "neuronprof").iterdir()) == [
        f"rank-{r}.{ext}" for r in (0, 1) for ext in ("html", "json.gz", "table.txt")
    ]


def test_the_integrations_drive_a_session_through_its_public_api_only():
    """start()/stop() and public attributes: no dunder calls, no private helper of the session."""
    import ast

    import neuronprof.integrations as integrations

    found = []
    for path in sorted(Path(integrations.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if node.attr in ("__enter__", "__exit__") or ("session" in owner_name and node.attr.startswith("_")):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
