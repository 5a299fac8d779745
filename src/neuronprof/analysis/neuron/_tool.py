"""Run Neuron's own profile viewer (``neuron-explorer``, older images ``neuron-profile``) safely.

The tool ships in the ``aws-neuronx-tools`` package, installed into
``/opt/aws/neuron/bin``. Its ``view`` command turns Neuron Runtime's files into
JSON: ``--output-format summary-json`` (one flat metrics object per profile)
and ``--output-format json`` (the full profile, ``system_profile.json`` for a
session folder); with ``--ingest-only --data-path P`` it writes the Parquet output
instead (``NeuronTool.ingest``). It may print log lines before the JSON, and has been reported
to hang after writing its output, so every run here:

* happens in an empty temporary folder (its working directory), with an
  explicit ``--output-file`` inside it, removed afterwards whatever happened;
* gets every path as an absolute path (it runs in that temporary folder, so a
  relative path would name nothing);
* is watched while it runs: as soon as its output is complete JSON that stays
  the same between two looks, it is not waited for any longer and its whole
  process group is killed (a note says so); otherwise a timeout kills it, and
  output it wrote completely before hanging is still used;
* kills the tool's process group whatever interrupts the wait (Ctrl-C, any
  exception), so no tool is left running;
* records the tool's version (``--version``).

A missing tool, a non-zero exit, a hang without output or output that is not
JSON raises [`NeuronToolError`][neuronprof.analysis.neuron.NeuronToolError],
whose message names the tool and the fix; callers turn it into one warning.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from neuronprof.analysis.errors import TraceError

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "ENV_VAR",
    "INSTALL_HINT",
    "NeuronTool",
    "NeuronToolError",
    "NeuronToolMissing",
    "extract_json",
    "find_neuron_tool",
]

ENV_VAR = "NEURONPROF_NEURON_EXPLORER"
"""Environment variable naming the ``neuron-explorer`` (or ``neuron-profile``) executable to use."""

TOOL_NAMES: tuple[str, ...] = ("neuron-explorer", "neuron-profile")
"""Executable names tried, newest first: Neuron Explorer, then the legacy Neuron Profiler."""

SEARCH_DIRS: tuple[str, ...] = ("/opt/aws/neuron/bin",)
"""Where ``aws-neuronx-tools`` installs the tools, searched after ``PATH``."""

INSTALL_HINT = (
    "install the AWS Neuron tools package aws-neuronx-tools (e.g. `sudo apt-get install aws-neuronx-tools` "
    "or `sudo dnf install aws-neuronx-tools`, from the Neuron repository), which puts neuron-explorer into "
    f"/opt/aws/neuron/bin, or set {ENV_VAR} to the tool's path"
)

_VERSION_TIMEOUT = 30.0
_TAIL = 400

T = TypeVar("T")


class NeuronToolError(RuntimeError):
    """Neuron's profile viewer is missing, failed, hung or wrote something unreadable.

    The message is one line naming the tool, what went wrong and how to fix it.
    """


class NeuronToolMissing(NeuronToolError):
    """Neuron's profile viewer is not installed (or the path named for it is not an executable)."""


@dataclass(frozen=True)
class NeuronTool:
    """A ``neuron-explorer`` / ``neuron-profile`` executable and its version.

    Attributes:
        path: The executable.
        name: Its file name (``"neuron-explorer"``).
        version: The first line of ``<tool> --version``, or ``None`` when it did not answer.
    """

    path: str
    name: str
    version: Optional[str] = None

    @property
    def label(self) -> str:
        """``"<name> <version>"``, for notes and the model's ``tool`` field."""
        return f"{self.name} {self.version}" if self.version else f"{self.name} (version unknown)"

    def view(
        self,
        inputs: Sequence[tuple[str, Union[str, os.PathLike[str]]]],
        output_format: str,
        consume: Callable[[str], T],
        *,
        timeout: float,
        notes: Optional[list[str]] = None,
    ) -> T:
        """Run ``<tool> view <inputs> --output-format <format> --output-file <tmp>`` and read its output.

        ``inputs`` are ``(option, path)`` pairs (``("-d", folder)``,
        ``("-n", neff)``, ``("-s", ntff)``); each path is made absolute before
        the tool runs in its temporary folder. When the tool does not exit after
        writing complete output, it is stopped and ``notes`` (when given) gets a
        line saying so. ``consume`` receives the path of the JSON the tool wrote (the output file,
        a ``system_profile.json`` it put in its working folder instead, or its
        standard output with any log lines before the JSON) and runs before the
        temporary folder is removed.

        Args:
            inputs: ``(option, path)`` pairs passed to the tool.
            output_format: The tool's ``--output-format``, e.g. ``"json"`` or ``"summary-json"``.
            consume: Called with the path of the JSON the tool wrote; its result is returned.
            timeout: Seconds the tool may run before it is stopped.
            notes: A list that gets a line when the tool had to be stopped; None for none.

        Raises:
            NeuronToolError: The tool failed, hung without output, or its output
                cannot be read by ``consume`` (a ``TraceError``/``ValueError``).
        """
        from neuronprof._io import private_dir, remove_private_dir  # on use: reading JSON runs no tool

        work = str(private_dir("neuron-explorer"))
        try:
            out = os.path.join(work, "output.json")
            args = [a for flag, path in inputs for a in (flag, os.path.abspath(os.fspath(path)))]
            cmd = [self.path, "view", *args, "--output-format", output_format, "--output-file", out]
            sizes: dict[str, int] = {}
            rc, stopped, stdout, stderr = _run(cmd, work, timeout, lambda: _complete(work, out, sizes))
            hung = stopped is not None
            produced = _produced(work, out, stdout)
            if hung and produced is not None and notes is not None:
                when = "after writing" if stopped == "done" else f"after the timeout of {timeout:g} s"
                notes.append(
                    f"{self.name} view --output-format {output_format} wrote its output but did not exit; "
                    f"it was stopped {when} and its output used"
                )
            if produced is None and hung:
                raise NeuronToolError(
                    f"{self.name} did not finish within {timeout:g} s and wrote no output "
                    f"({' '.join(cmd[1:4])} ...); {_hint(self)}"
                )
            if rc != 0 and not hung:
                raise NeuronToolError(f"{self.name} view failed with exit status {rc}: {_tail(stderr)}; {_hint(self)}")
            if produced is None:
                raise NeuronToolError(f"{self.name} view wrote no output ({_tail(stderr)}); {_hint(self)}")
            try:
                return consume(produced)
            except (TraceError, ValueError) as exc:
                late = {None: "", "done": " (it was stopped after writing)"}.get(stopped, " (stopped at the timeout)")
                # The temporary file is gone once this returns: do not name it.
                why = str(exc).replace(f"{produced}: ", "").replace(produced, "its output")
                raise NeuronToolError(
                    f"{self.name} view wrote output that is not the documented {output_format} format{late}: "
                    f"{why}; {_hint(self)}"
                ) from None
        finally:
            remove_private_dir(Path(work))

    def ingest(
        self,
        folder: Union[str, os.PathLike[str]],
        data_path: Union[str, os.PathLike[str]],
        *,
        display_name: str,
        timeout: float,
        notes: Optional[list[str]] = None,
    ) -> str:
        """Run ``<tool> view -d <folder> --ingest-only --data-path <data_path> --display-name <name> ...``.

        Writes the session folder's system profile as Parquet tables under
        ``data_path/profiles/global/<name>@latest/``, skipping the device traces
        (``--ignore-instruction-trace --ignore-dma-trace --ignore-event-trace``). The
        tool runs in an empty temporary folder; when it has not exited once its output is
        complete (``SystemProfileEvents.parquet`` is there, every Parquet file it wrote
        ends in Parquet's ``PAR1`` footer, and no file appeared or grew since the last
        look), it is stopped; it is killed at the timeout.

        Args:
            folder: The Neuron Runtime session folder to read.
            data_path: Where the tool writes its Parquet tables.
            display_name: The profile's name under ``data_path``.
            timeout: Seconds the tool may run before it is stopped.
            notes: A list that gets a line when the tool had to be stopped; None for none.

        Returns:
            The path of the ``SystemProfileEvents.parquet`` written.

        Raises:
            NeuronToolError: The tool failed, or wrote no ``SystemProfileEvents.parquet``.
        """
        from neuronprof.analysis.neuron._names import INGEST_FLAGS, SYSTEM_EVENTS

        data = os.path.abspath(os.fspath(data_path))
        events = os.path.join(data, "profiles", "global", f"{display_name}@latest", SYSTEM_EVENTS)
        cmd = [
            self.path,
            "view",
            "-d",
            os.path.abspath(os.fspath(folder)),
            INGEST_FLAGS[0],
            "--data-path",
            data,
            "--display-name",
            display_name,
            *INGEST_FLAGS[1:],
        ]
        from neuronprof._io import private_dir, remove_private_dir  # on use: reading JSON runs no tool

        work = str(private_dir("neuron-explorer"))
        try:
            seen: list[tuple[tuple[str, int], ...]] = []
            rc, stopped, _, stderr = _run(cmd, work, timeout, lambda: _parquet_complete(data, events, seen))
        finally:
            remove_private_dir(Path(work))
        written = _parquet_complete(data, events, [_files(data)])
        if stopped is not None and written and notes is not None:
            when = "after writing" if stopped == "done" else f"after the timeout of {timeout:g} s"
            notes.append(f"{self.name} view --ingest-only wrote its output but did not exit; it was stopped {when}")
        if rc != 0 and stopped is None:
            raise NeuronToolError(f"{self.name} view --ingest-only failed with exit status {rc}: {_tail(stderr)}")
        if not written:
            raise NeuronToolError(
                f"{self.name} view --ingest-only wrote no complete {SYSTEM_EVENTS} under {display_name}@latest "
                f"({_tail(stderr)})"
            )
        return events


def find_neuron_tool(tool: Optional[str] = None) -> NeuronTool:
    """Find Neuron's profile viewer and ask for its version.

    Looked for, in order: ``tool`` when given; the path in the environment
    variable ``NEURONPROF_NEURON_EXPLORER``; ``neuron-explorer`` on ``PATH``,
    then in ``/opt/aws/neuron/bin``; ``neuron-profile`` the same way.

    Args:
        tool: A path or command name to use instead of searching; None searches.

    Raises:
        NeuronToolError: Nothing was found, or the named path is not an executable.
    """
    named = tool if tool is not None else os.environ.get(ENV_VAR) or None
    if named is not None:
        found = shutil.which(os.fspath(named))
        if found is None:
            where = "the given path" if tool is not None else ENV_VAR
            raise NeuronToolMissing(f"{named} (from {where}) is not an executable neuron-explorer; {INSTALL_HINT}")
        return NeuronTool(found, os.path.basename(found), _version(found))
    for name in TOOL_NAMES:
        found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SEARCH_DIRS))
        if found is not None:
            return NeuronTool(found, name, _version(found))
    raise NeuronToolMissing(
        f"neuron-explorer was not found (looked on PATH and in {', '.join(SEARCH_DIRS)}); {INSTALL_HINT}"
    )


def extract_json(text: str, *, what: str = "output") -> Any:
    """Parse JSON that may follow log lines (``INFO[0000] ...``), as the tool prints them.

    Args:
        text: The tool's output.
        what: What the text is, for the error message.

    Raises:
        ValueError: No JSON object or array in ``text``.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{what} is empty")
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    # Log lines come first; the document starts at the beginning of a line.
    offset = 0
    for line in text.splitlines(keepends=True):
        head = line.lstrip()
        if head.startswith(("{", "[")):
            start = offset + len(line) - len(head)
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                offset += len(line)
                continue
            if not text[end:].strip() or isinstance(value, dict):
                return value
        offset += len(line)
    raise ValueError(f"{what} holds no JSON document (first line: {stripped.splitlines()[0][:120]!r})")


# -- helpers ---------------------------------------------------------------------------


def _parse(data: bytes) -> Any:
    try:
        import msgspec
    except ImportError:  # optional at import; the standard library parses it too, more slowly
        return json.loads(data)
    return msgspec.json.decode(data)


def _hint(tool: NeuronTool) -> str:
    return f"check that {tool.path} works, or reinstall it: {INSTALL_HINT}"


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return (text[-_TAIL:] if len(text) > _TAIL else text) or "no message"


def _run(
    cmd: Sequence[str], cwd: str, timeout: float, done: Optional[Callable[[], bool]] = None
) -> tuple[int, Optional[str], str, str]:
    """Run ``cmd`` in ``cwd`` with its output in files there.

    Returns ``(exit status, stopped, stdout, stderr)``; ``stopped`` says why the
    tool was killed: ``"timeout"`` after ``timeout`` seconds, ``"done"`` once
    ``done()`` said its output is complete while it kept running; ``None`` when
    it exited by itself. Its process group is killed in a
    ``finally``, so an interrupt (Ctrl-C) or any exception while waiting leaves
    no tool behind.
    """
    import subprocess  # on use: reading the JSON files a profile holds starts no process

    out_path = os.path.join(cwd, ".stdout")
    err_path = os.path.join(cwd, ".stderr")
    stopped: Optional[str] = None
    with open(out_path, "wb") as so, open(err_path, "wb") as se:
        try:
            # A session of its own, so that stopping it kills whatever the tool started too.
            proc = subprocess.Popen(
                list(cmd), cwd=cwd, stdin=subprocess.DEVNULL, stdout=so, stderr=se, start_new_session=True
            )
        except OSError as exc:
            name = os.path.basename(cmd[0])
            raise NeuronToolError(f"{name} cannot be started ({exc.strerror or exc}); {INSTALL_HINT}") from None
        try:
            deadline = time.monotonic() + timeout
            pause = 0.05
            rc: Optional[int] = None
            while rc is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = "timeout"
                    break
                try:
                    rc = proc.wait(timeout=min(pause, left))
                except subprocess.TimeoutExpired:
                    # Looks at the output get rarer (up to every 2 s), so a long run is not slowed down.
                    pause = min(2.0, pause * 1.5)
                    if done is not None and done():
                        stopped = "done"
                        break
        finally:
            if proc.poll() is None:
                _kill(proc)
                proc.wait()
        rc = proc.returncode
    stdout, stderr = (Path(p).read_text(encoding="utf-8", errors="replace") for p in (out_path, err_path))
    return rc, stopped, stdout, stderr


def _complete(work: str, out: str, sizes: dict[str, int]) -> bool:
    """True once the tool's output (the output file, ``system_profile.json`` or stdout) is complete JSON.

    A file counts once it ends in ``}``/``]``, its size did not change since the
    last look, and it parses.
    """
    for path in (out, os.path.join(work, "system_profile.json"), os.path.join(work, ".stdout")):
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        if size == 0:
            continue
        seen = sizes.get(path)
        sizes[path] = size
        if seen != size:
            return False  # still growing (or first look): look again later
        try:
            with open(path, "rb") as f:
                f.seek(max(0, size - 64))
                if not f.read().rstrip().endswith((b"}", b"]")):
                    return False
                f.seek(0)
                data = f.read()
            if path.endswith(".stdout"):
                extract_json(data.decode("utf-8", errors="replace"))
            else:
                _parse(data)
        except (OSError, ValueError):  # msgspec.DecodeError is a ValueError
            return False
        return True
    return False


def _files(root: str) -> tuple[tuple[str, int], ...]:
    """Every file under ``root`` with its size, in name order."""
    found = []
    for here, _, names in os.walk(root):
        for name in names:
            path = os.path.join(here, name)
            try:
                found.append((path, os.path.getsize(path)))
            except OSError:
                continue
    return tuple(sorted(found))


def _parquet_complete(root: str, events: str, seen: list[tuple[tuple[str, int], ...]]) -> bool:
    """True once ``events`` exists, every ``.parquet`` under ``root`` ends in ``PAR1``, and nothing changed.

    ``seen`` holds the previous look (the files and their sizes); it is updated.
    """
    now = _files(root)
    before = seen[-1] if seen else None
    seen[:] = [now]
    if now != before or not any(path == events for path, _ in now):
        return False
    for path, size in now:
        if path.endswith(".parquet"):
            if size <= 8:
                return False
            try:
                with open(path, "rb") as f:
                    f.seek(size - 4)
                    if f.read(4) != b"PAR1":
                        return False
            except OSError:
                return False
    return True


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, ProcessLookupError, PermissionError):  # no process groups, or already gone
        proc.kill()


def _produced(work: str, out: str, stdout: str) -> Optional[str]:
    """Return the file holding the tool's JSON: the output file, one it put in ``work``, or its stdout."""
    if os.path.isfile(out) and os.path.getsize(out) > 0:
        return out
    default = os.path.join(work, "system_profile.json")
    if os.path.isfile(default) and os.path.getsize(default) > 0:
        return default
    if stdout.strip():
        from neuronprof._io import write_text

        return str(write_text(Path(work) / "stdout.json", stdout, overwrite=True))
    return None


def _version(path: str) -> Optional[str]:
    from neuronprof._io import private_dir, remove_private_dir

    work = str(private_dir("neuron-explorer"))
    try:
        rc, stopped, stdout, stderr = _run([path, "--version"], work, _VERSION_TIMEOUT)
    except NeuronToolError:
        return None
    finally:
        remove_private_dir(Path(work))
    if stopped is not None or rc != 0:
        return None
    for line in (stdout or stderr).splitlines():
        line = line.strip()
        if line:
            for name in (*TOOL_NAMES, os.path.basename(path)):
                if line.startswith(name) and line[len(name) :].strip(" :"):
                    return line[len(name) :].strip(" :")
            return line
    return None
