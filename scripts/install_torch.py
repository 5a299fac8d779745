"""Install the pinned torch for ``make``: from PyTorch's CPU wheel index when it answers, else from PyPI.

``make install`` runs this with the virtual environment's Python. PyTorch's CPU index
(``TORCH_INDEX``) holds the CPU-only build (a plain ``pip install torch`` pulls the
multi-GB CUDA build on Linux), but a mirror or a firewall may not reach it; pip would
then retry it about 60 times, a warning each, before it gives up. This asks the index
once, with a short timeout, and installs from PyPI alone when it does not answer, in
one line. The last line says which torch build was installed.

    python scripts/install_torch.py --spec torch==2.13.0 --index https://download.pytorch.org/whl/cpu
    python scripts/install_torch.py --spec torch==2.13.0 --index ''   # PyPI only
    python scripts/install_torch.py ... --dry-run                     # print the pip command only

Exit status: pip's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Optional

# Seconds to wait for the index's first answer: a reachable index answers in well under a
# second; a firewall that drops packets would otherwise hold pip for minutes.
PROBE_TIMEOUT_S = 5
# pip's own settings for the packages themselves (large wheels on a slow link): one retry
# with a 30 s socket timeout instead of pip's 5 retries of 15 s per file and index page.
PIP_NETWORK = ("--timeout", "30", "--retries", "1")


def index_answers(index: str, timeout: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Ask ``index`` for torch's page once; return None when it answers, else why not (one line)."""
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read(1)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(reason) or type(reason).__name__
    return None


def pip_command(spec: str, index: str, python: str = sys.executable) -> list[str]:
    """The pip command that installs ``spec``, searching ``index`` besides PyPI when given."""
    cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PIP_NETWORK]
    if index:
        cmd += ["--extra-index-url", index]
    return [*cmd, spec]


def installed_build(python: str = sys.executable) -> str:
    """One line naming the torch installed for ``python``: its version and CPU-only, CUDA or ROCm build."""
    code = (
        "import torch\n"
        "v = torch.version\n"
        "kind = f'CUDA {v.cuda} build' if v.cuda else f'ROCm {v.hip} build' if getattr(v, 'hip', None) else "
        "'CPU-only build'\n"
        "print(f'torch {torch.__version__} installed ({kind})')\n"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return "torch was installed, but it does not import: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return proc.stdout.strip()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the torch requirement, such as torch==2.13.0")
    parser.add_argument("--index", default="", help="a wheel index searched besides PyPI ('' for none)")
    parser.add_argument("--dry-run", action="store_true", help="print the pip command instead of running it")
    args = parser.parse_args(argv)
    index = args.index.strip()
    if index:
        why = index_answers(index)
        if why is not None:
            print(
                f"{index} does not answer ({why}); installing {args.spec} from PyPI "
                "(on Linux, the CUDA build: several GB)",
                flush=True,
            )
            index = ""
    cmd = pip_command(args.spec, index)
    if args.dry_run:
        print(" ".join(cmd[1:]))
        return 0
    status = subprocess.run(cmd).returncode
    if status == 0:
        print(installed_build())
    return status


if __name__ == "__main__":
    sys.exit(main())
