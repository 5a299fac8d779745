"""``python -m neuronprof`` runs the ``neuronprof`` command."""

import sys

from neuronprof.cli import main

sys.exit(main())
