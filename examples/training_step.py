"""Profile a training step: loading batches from a DataLoader, forward, loss, backward, optimizer step.

Copy this file into a project and run it: ``python training_step.py``. It prints the
table of the recorded steps and the findings (``s.insights()``): the same story on any
machine, because the data set loads slowly on purpose (``SlowDataset``) and the batches
are loaded in this process. On an accelerator,
pass ``--device neuron`` (or ``tpu``, ``cuda``); ``neuronprof doctor --probe`` says first
whether this machine can.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset

import neuronprof


class SlowDataset(Dataset):
    """A synthetic classification data set whose samples take a while to load.

    Each ``__getitem__`` waits ``load_ms`` milliseconds, as reading and decoding a
    file would: this loop's input pipeline is its bottleneck on purpose, so that the
    findings have something to say. A batch of 32 then takes at least 160 ms to load in
    the main process (a sleep lasts at least as long as asked, however busy the machine),
    many times the few milliseconds this small model computes. Replace it with your own
    Dataset.
    """

    def __init__(self, samples: int = 2048, dim: int = 64, classes: int = 10, load_ms: float = 5.0) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(samples, dim, generator=generator)
        self.labels = torch.randint(0, classes, (samples,), generator=generator)
        self.load_s = load_ms / 1000

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.load_s)  # stands in for reading and decoding one sample
        return self.features[index], self.labels[index]


def make_loader(batch_size: int = 32, num_workers: int = 0) -> DataLoader:
    """Batches of the data set, loaded in this process, or in ``num_workers`` worker processes."""
    return DataLoader(
        SlowDataset(),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        drop_last=True,
    )


def make_model(dim: int = 64, hidden: int = 256, classes: int = 10) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(dim, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, classes),
    )


def train(device: str = "cpu", active: int = 5, num_workers: int = 0, with_stack: bool = False) -> neuronprof.Session:
    """Train until the profiling schedule is done; return the finished session."""
    # Before anything moves to the device: on a machine without it, neuronprof says what is
    # missing and to run `neuronprof doctor --probe`, instead of a torch error at .to(device).
    device = neuronprof.require_backend(device)
    # One torch thread: this small model gains nothing from more, and with several its CPU
    # times swing with what else runs on the machine's cores (threads wait for each other).
    torch.set_num_threads(1)
    loader = make_loader(num_workers=num_workers)
    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    # Skip 2 steps, warm up 1, then record `active` steps: each recorded step is one sample.
    with neuronprof.session(backend="auto" if device == "cpu" else device, active=active, with_stack=with_stack) as s:
        batches = iter(loader)
        while s.steps_taken < s.total_steps:
            with record_function("data"):
                try:
                    x, y = next(batches)
                except StopIteration:  # a new epoch
                    batches = iter(loader)
                    x, y = next(batches)
                x, y = x.to(device), y.to(device)
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
            s.step()  # ends the step: waits for the device, advances the schedule
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, neuron, tpu or cuda (default: cpu)")
    parser.add_argument("--active", type=int, default=5, help="steps recorded (default: 5)")
    parser.add_argument(
        "--workers", type=int, default=0, help="DataLoader worker processes (default: 0, load in this process)"
    )
    args = parser.parse_args()
    try:
        s = train(device=args.device, active=args.active, num_workers=args.workers)
    except neuronprof.BackendUnavailableError as exc:
        raise SystemExit(f"training_step.py: {exc}") from None
    # Sorted by CPU total, the record_function labels come first: how the step splits into
    # phases. The default sort (self time) then finds the expensive operators.
    print(s.table(sort_by="cpu_total", row_limit=20))
    print(s.table(row_limit=10))
    print(s.insights())


if __name__ == "__main__":
    main()
