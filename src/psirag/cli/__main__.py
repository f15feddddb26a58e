"""``python -m psirag.cli``: the ``psirag`` command."""

import sys

from psirag.cli import main

sys.exit(main())
