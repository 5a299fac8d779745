"""Rebuild the traces of the findings corpus in ``tests/corpus/traces/``.

Each case is a real workload (model code from ``transformers`` built from a tiny
config, or a small ``nn.Module`` loop), recorded with neuronprof's public API:
``neuronprof.session(...)``, ``s.steps()`` and ``s.export(path)`` to a gzipped
Chrome trace. What each trace shows, and which findings are right for it, is in
``labels.json`` next to this script; ``tests/test_findings_corpus.py`` checks
``neuronprof advise`` against those labels.

Run it with the project's virtual environment (it takes a few minutes; the tests
never run it)::

    python tests/corpus/generate.py              # every case
    python tests/corpus/generate.py gpt2_infer   # only the cases named

Models are built from configs: nothing is downloaded. Every case seeds torch and
uses one thread, so that reruns record the same ops with the same shapes (their
durations differ from run to run, as on any machine).
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import random
import re
import shutil
import socket
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import neuronprof

HERE = Path(__file__).resolve().parent
TRACES = HERE / "traces"
BACKENDS = HERE.parent / "backends"

WARMUP_CALLS = 3
"""Steps run before the session opens: lazy initialisation and allocator growth stay out of the trace."""
ACTIVE = 3
"""Recorded steps per case: enough to tell "every step" from "some steps", small enough for small files."""
ATTEMPTS = 3
"""Recordings made per case; the least disturbed one is kept (see ``record``)."""
VOCAB = 256

CASES: dict[str, Callable[[Path], None]] = {}


def case(fn: Callable[[Path], None]) -> Callable[[Path], None]:
    """Register a case under its function's name; it writes its trace to the path it is given."""
    CASES[fn.__name__] = fn
    return fn


@contextmanager
def _scratch() -> Iterator[Path]:
    """A private output folder for the session: only the exported trace is kept."""
    folder = Path(tempfile.mkdtemp(prefix="neuronprof-corpus-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(1)


_TRACE_NAME = re.compile(rb'"traceName": "[^"]*"')


def name_trace(path: Path) -> None:
    """Set the trace's ``traceName`` header to its own file name.

    The saved trace names the file kineto first wrote (a private temporary file of the
    session); the corpus is committed, so no path of the machine that recorded it stays
    in it. Everything else is left byte for byte as exported.
    """
    with gzip.open(path, "rb") as f:
        text = f.read()
    text = _TRACE_NAME.sub(f'"traceName": "{path.name}"'.encode(), text, count=1)
    # mtime=0: rebuilding the same trace gives the same bytes.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(text)


def _recorded(step: Callable[[], Any], out: Path, *, record_shapes: bool) -> tuple[Any, float]:
    """One session of ``ACTIVE`` recorded steps; returns it and the recorded steps' wall time, in seconds."""
    times = []
    # One profiled warm-up step inside the session too: the profiler's own first-step costs stay out.
    with neuronprof.session(
        backend="cpu", record_shapes=record_shapes, wait=0, warmup=1, active=ACTIVE, output_dir=out
    ) as s:
        for _ in s.steps():
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    return s, sum(times[-ACTIVE:])


def record(
    path: Path,
    step: Callable[[], Any],
    *,
    record_shapes: bool = True,
    warmup_calls: int = WARMUP_CALLS,
    attempts: int = ATTEMPTS,
) -> None:
    """Run ``step`` a few times, then record ``ACTIVE`` steps of it and export them to ``path``.

    Of ``attempts`` recordings, the one whose recorded steps took the least wall time is kept:
    on a shared machine, that is the one the other processes disturbed least.

    Args:
        path: The ``.json.gz`` trace to write.
        step: One step of the workload.
        record_shapes: The session's ``record_shapes``.
        warmup_calls: Steps run before the session opens.
        attempts: Recordings to choose from.
    """
    for _ in range(warmup_calls):
        step()
    best = math.inf
    with _scratch() as out:
        for _ in range(attempts):
            s, took = _recorded(step, out, record_shapes=record_shapes)
            if took < best:
                best = took
                s.export(path, overwrite=True)
    name_trace(path)


# == the models, from tiny configs ==================================================


def gpt2(**overrides: Any) -> Any:
    """A two-layer GPT-2 (learned positions, LayerNorm, Conv1D projections with bias, tanh GELU written out)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = dict(
        n_layer=2,
        n_head=2,
        n_embd=64,
        n_positions=64,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=1,
        attn_implementation="sdpa",
    )
    cfg.update(overrides)
    return GPT2LMHeadModel(GPT2Config(**cfg))


def llama(**overrides: Any) -> Any:
    """A two-layer Llama (RMSNorm, rotary positions, bias-less projections, SwiGLU MLP, grouped KV heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=64,
        intermediate_size=128,
        max_position_embeddings=64,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        attn_implementation="sdpa",
    )
    cfg.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**cfg))


def bert_config(**overrides: Any) -> Any:
    """A two-layer BERT config (GELU, LayerNorm, SDPA attention); ``overrides`` adds a head's settings."""
    from transformers import BertConfig

    cfg = dict(
        num_hidden_layers=2,
        num_attention_heads=2,
        hidden_size=64,
        intermediate_size=128,
        max_position_embeddings=64,
        vocab_size=VOCAB,
        attn_implementation="sdpa",
    )
    cfg.update(overrides)
    return BertConfig(**cfg)


def resnet() -> Any:
    """A small two-stage ResNet (basic blocks, batch norm)."""
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    return ResNetModel(cfg)


def tokens(batch: int = 2, length: int = 32) -> torch.Tensor:
    """Random token ids, clear of the special ids 0 and 1."""
    return torch.randint(2, VOCAB, (batch, length))


def train_step(model: Any, batch: dict[str, torch.Tensor], *, autocast: bool = False) -> Callable[[], None]:
    """One full training step (forward, loss, backward, AdamW) of a model whose output has a ``loss``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step() -> None:
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss
        else:
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def inference_step(model: Any, *args: Any, **kwargs: Any) -> Callable[[], None]:
    """One forward of ``model`` in eval mode, under no_grad."""
    model.eval()

    def step() -> None:
        with torch.no_grad():
            model(*args, **kwargs)

    return step


# == causal LMs ======================================================================


@case
def gpt2_infer(path: Path) -> None:
    """GPT-2 forward under no_grad."""
    record(path, inference_step(gpt2(), tokens()))


@case
def gpt2_train(path: Path) -> None:
    """GPT-2 training step in float32 with AdamW."""
    ids = tokens()
    record(path, train_step(gpt2(), {"input_ids": ids, "labels": ids}))


@case
def gpt2_generate(path: Path) -> None:
    """GPT-2 greedy generate() of 4 new tokens, without shapes."""
    model = gpt2().eval()
    ids = tokens(1, 8)

    def step() -> None:
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)

    record(path, step, record_shapes=False)


@case
def gpt2_compile(path: Path) -> None:
    """GPT-2 forward compiled with torch.compile (inductor); compiled before the recording."""
    torch._dynamo.reset()  # frame numbers and caches of this case only
    model = gpt2().eval()
    compiled = torch.compile(model)
    ids = tokens()

    def step() -> None:
        with torch.no_grad():
            compiled(ids)

    record(path, step)


@case
def llama_infer(path: Path) -> None:
    """Llama forward under no_grad."""
    record(path, inference_step(llama(), tokens()))


@case
def llama_train_bf16(path: Path) -> None:
    """Llama training step under CPU autocast to bfloat16, AdamW."""
    ids = tokens()
    record(path, train_step(llama(), {"input_ids": ids, "labels": ids}, autocast=True))


@case
def llama_generate(path: Path) -> None:
    """Llama greedy generate() of 4 new tokens (with its KV cache)."""
    model = llama().eval()
    ids = tokens(1, 8)

    def step() -> None:
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)

    record(path, step)


@case
def llama_compile(path: Path) -> None:
    """Llama forward compiled with torch.compile (inductor); compiled before the recording."""
    torch._dynamo.reset()  # frame numbers and caches of this case only
    model = llama().eval()
    compiled = torch.compile(model)
    ids = tokens()

    def step() -> None:
        with torch.no_grad():
            compiled(ids)

    record(path, step)


# == encoder and vision ==============================================================


@case
def bert_infer(path: Path) -> None:
    """BERT encoder forward under no_grad, with an attention mask."""
    from transformers import BertModel

    ids = tokens()
    record(path, inference_step(BertModel(bert_config()), input_ids=ids, attention_mask=torch.ones_like(ids)))


@case
def bert_train(path: Path) -> None:
    """BERT sequence classification training step in float32 with AdamW."""
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification(bert_config(num_labels=3))
    ids = tokens()
    record(path, train_step(model, {"input_ids": ids, "labels": torch.tensor([0, 2])}))


@case
def resnet_infer(path: Path) -> None:
    """ResNet forward under no_grad on 32x32 images, without shapes."""
    record(path, inference_step(resnet(), torch.randn(4, 3, 32, 32)), record_shapes=False)


@case
def resnet_train_bf16(path: Path) -> None:
    """ResNet classification training step under CPU autocast to bfloat16, AdamW."""
    model = resnet()
    head = torch.nn.Linear(32, 10)
    params = [*model.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([1, 3, 5, 7])

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pooled = model(images).pooler_output.flatten(1)
            loss = torch.nn.functional.cross_entropy(head(pooled), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    record(path, step)


# == planted problems ================================================================


class Mlp(torch.nn.Module):
    """A small two-layer MLP regressor: the clean model the planted problems are added to."""

    def __init__(self, width: int = 128) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


@case
def planted_float64(path: Path) -> None:
    """Planted: per-sample loss weights kept as a float64 array (numpy's default) in the loss of every step."""
    import numpy as np

    model = Mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    # torch.from_numpy keeps numpy's float64: the loss is then computed in float64.
    weights = torch.from_numpy(np.linspace(0.5, 1.5, 64)).unsqueeze(1)

    def step() -> None:
        loss = (((model(x) - y) ** 2) * weights).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    record(path, step)


@case
def planted_to_per_step(path: Path) -> None:
    """Planted: a constant table kept in float64 and converted with .to(x.dtype) inside every step."""
    import numpy as np

    model = Mlp()
    x = torch.randn(64, 128)
    # A sinusoidal position table built in numpy (float64), converted again on every call.
    pos = np.arange(64)[:, None] / np.power(10000.0, np.arange(128)[None, :] / 128)
    table = torch.from_numpy(np.where(np.arange(128) % 2 == 0, np.sin(pos), np.cos(pos)))

    def step() -> None:
        with torch.no_grad():
            model(x + table.to(x.dtype))

    record(path, step)


class TinyDecoder(torch.nn.Module):
    """A one-layer GRU-like language model, written out: embedding, gate, candidate state, output head."""

    def __init__(self, vocab: int = 64, hidden: int = 16) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.gate = torch.nn.Linear(2 * hidden, hidden)
        self.cand = torch.nn.Linear(2 * hidden, hidden)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tok: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xh = torch.cat([self.emb(tok), h], dim=-1)
        z = torch.sigmoid(self.gate(xh))
        h = z * h + (1 - z) * torch.tanh(self.cand(xh))
        return self.out(h), h


def top_p_sample(logits: list[float], p: float, rng: random.Random) -> int:
    """Nucleus sampling written in Python: softmax, sort, keep the smallest set holding ``p``, draw."""
    peak = max(logits)
    weights = [math.exp(v - peak) for v in logits]
    total = sum(weights)
    ranked = sorted(((w / total, i) for i, w in enumerate(weights)), reverse=True)
    kept, mass = [], 0.0
    for prob, i in ranked:
        kept.append((prob, i))
        mass += prob
        if mass >= p:
            break
    draw = rng.random() * mass
    for prob, i in kept:
        draw -= prob
        if draw <= 0:
            return i
    return kept[-1][1]


@case
def planted_python_loop(path: Path) -> None:
    """Planted: decoding token by token in a Python loop of tiny ops, sampling and detokenising in Python.

    No stop string ever comes up: every step decodes all 32 tokens.
    """
    vocab = 256
    model = TinyDecoder(vocab).eval()
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(vocab)]
    stops = ("</s>", "\n\n", "###", "END")

    def step() -> None:
        sampler = random.Random(0)  # the same tokens every step
        with torch.no_grad():
            h, tok, text = torch.zeros(1, 16), torch.tensor([2]), []
            for _ in range(32):
                logits, h = model(tok, h)
                index = top_p_sample(logits[0].tolist(), 0.9, sampler)
                tok = torch.tensor([index])
                text.append(words[index])
                decoded = " ".join(text)
                if any(stop in decoded for stop in stops):
                    break

    # Without shapes: the profiler's own cost per op stays small beside the Python between the ops.
    record(path, step, record_shapes=False)


class SlowText(torch.utils.data.Dataset):
    """Text tokenised in ``__getitem__``: lower-casing, splitting and a word-level vocabulary, in Python."""

    def __init__(self, n: int = 256, words: int = 400, length: int = 32) -> None:
        rng = random.Random(0)
        lexicon = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 8))) for _ in range(500)]
        self.docs = [" ".join(rng.choice(lexicon).upper() for _ in range(words)) for _ in range(n)]
        self.length = length

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        words = self.docs[i].lower().split()
        ids = [2 + sum(ord(c) * 31**k for k, c in enumerate(w)) % (VOCAB - 2) for w in words]
        # Keep the most frequent words, as a bag-of-words truncation would.
        counts: dict[int, int] = {}
        for t in ids:
            counts[t] = counts.get(t, 0) + 1
        kept = sorted(counts, key=lambda t: (-counts[t], t))[: self.length]
        kept += [1] * (self.length - len(kept))
        return torch.tensor(kept), torch.tensor(i % 3)


@case
def planted_slow_dataloader(path: Path) -> None:
    """Planted: a DataLoader with num_workers=0 whose dataset tokenises text in __getitem__."""
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification(bert_config(num_labels=3)).eval()
    loader = torch.utils.data.DataLoader(SlowText(), batch_size=8, num_workers=0)
    batches = iter(loader)

    def step() -> None:
        ids, labels = next(batches)
        with torch.no_grad():
            model(input_ids=ids, labels=labels)

    record(path, step)


@case
def clean_scalar_mul_no_shapes(path: Path) -> None:
    """Clean: an MLP whose output is scaled by a Python int (``x * 2``), recorded without shapes."""
    model = Mlp().eval()
    x = torch.randn(64, 128)

    def step() -> None:
        with torch.no_grad():
            torch.cos(torch.sin(model(x)) * 2) + 1

    record(path, step, record_shapes=False)


_ITEM_SNIPPET = """
import torch
import neuronprof

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
losses = []


def step():
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())  # logged every step: the host reads the loss back


for _ in range({warmup}):
    step()
with neuronprof.session(
    backend={backend!r}, record_shapes=True, wait=0, warmup=1, active={active}, output_dir={out!r}
) as s:
    for _ in s.steps():
        step()
s.export({path!r}, overwrite=True)
report(s.device_label)
"""


@case
def planted_item_per_step(path: Path) -> None:
    """Planted: ``loss.item()`` every step on a PrivateUse1 device (the project's kineto test backend).

    The test backend records a device kernel per op on a profile with device time;
    torch renames PrivateUse1 once per process, so the step runs in a subprocess.
    """
    sys.path.insert(0, str(BACKENDS))
    from run_in_subprocess import clean_stderr, result, run_script, unavailable_reason

    with _scratch() as out:
        code = _ITEM_SNIPPET.format(warmup=WARMUP_CALLS, active=ACTIVE, backend="mydev", out=str(out), path=str(path))
        proc = run_script(textwrap.dedent(code), backend="mydev", timeout=900)
    reason = unavailable_reason(proc)
    if reason is not None:
        raise RuntimeError(f"the PrivateUse1 test backend cannot be built here: {reason}")
    if proc.returncode != 0:
        raise RuntimeError(f"the device step failed:\n{clean_stderr(proc.stderr)}")
    if result(proc) is None:
        raise RuntimeError("the test backend recorded no device: the trace would hold no device events")
    name_trace(path)


# == two ranks =======================================================================


def _free_port() -> int:
    """A TCP port free on the loopback now, for the ranks' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


STRAGGLER_MATMULS = 12
"""Extra 512 x 512 matmuls rank 1 runs per step in ``ddp_straggler``: rank 0 waits for them for about 40 % of
each step, far past the jitter of a balanced step."""


def _ddp_rank(rank: int, world: int, port: int, folder: str, straggle: bool) -> None:
    """One rank of a DDP training step of GPT-2 over gloo; rank 1 straggles when asked."""
    import torch.distributed as dist
    import transformers
    from torch.nn.parallel import DistributedDataParallel

    transformers.logging.set_verbosity_error()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    _seed()
    model = DistributedDataParallel(gpt2())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    torch.manual_seed(rank)  # each rank its own batch, as a distributed sampler gives
    # Enough tokens per step that the compute, not the gradient all-reduce, fills a balanced step.
    ids = tokens(16, 64)
    extra = torch.randn(512, 512)

    def step() -> None:
        if straggle and rank == 1:
            # The straggler: extra work before its forward (stands for a slower data shard or host).
            for _ in range(STRAGGLER_MATMULS):
                extra @ extra
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(WARMUP_CALLS):
        step()
    best = math.inf
    with _scratch() as out:
        for _ in range(ATTEMPTS):
            s, took = _recorded(step, out, record_shapes=True)
            # Both ranks keep the same attempt: the one whose slower rank was fastest.
            slowest = torch.tensor([took], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if slowest.item() < best:
                best = slowest.item()
                # neuronprof's own name for a rank's trace (backend, start time, pid, rank), gzipped.
                default = s.export()
                default.unlink()  # a later attempt in the same second would otherwise get a suffixed name
                for old in Path(folder).glob(f"*_rank{rank}.json.gz"):
                    old.unlink()
                s.export(Path(folder) / (default.name + ".gz"))
                name_trace(Path(folder) / (default.name + ".gz"))
    dist.barrier()
    dist.destroy_process_group()


def _ddp(folder: Path, straggle: bool) -> None:
    """Spawn two ranks that each write their trace into ``folder``."""
    import torch.multiprocessing as mp

    folder.mkdir(parents=True, exist_ok=True)
    mp.spawn(_ddp_rank, args=(2, _free_port(), str(folder), straggle), nprocs=2, join=True)


@case
def ddp_clean(path: Path) -> None:
    """Two-rank DDP training step of GPT-2 over gloo, both ranks alike."""
    _ddp(path, straggle=False)


@case
def ddp_straggler(path: Path) -> None:
    """Two-rank DDP training step of GPT-2 over gloo; rank 1 does extra matmuls before every step."""
    _ddp(path, straggle=True)


FOLDER_CASES = frozenset({"ddp_clean", "ddp_straggler"})
"""Cases whose trace is a folder of rank files rather than one file."""


def target(name: str) -> Path:
    """Where a case's trace goes: ``traces/<name>.json.gz``, or the folder ``traces/<name>/`` of its ranks."""
    return TRACES / name if name in FOLDER_CASES else TRACES / f"{name}.json.gz"


def main(argv: list[str] | None = None) -> int:
    """Rebuild the cases named in ``argv`` (all of them by default); print each trace's size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"cases to rebuild (default: all): {', '.join(CASES)}")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    # torch.compile's cache in a folder of its own, never a shared one.
    cache = tempfile.mkdtemp(prefix="neuronprof-corpus-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    import transformers

    transformers.logging.set_verbosity_error()  # config notes about tiny vocabularies, not about the traces
    TRACES.mkdir(parents=True, exist_ok=True)
    try:
        for name in args.cases or list(CASES):
            path = target(name)
            if path.is_dir():
                shutil.rmtree(path)  # rank files carry a time and a pid: old ones would stay beside new ones
            _seed()
            CASES[name](path)
            size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
            print(f"{name}: {size / 1024:.0f} KB", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
