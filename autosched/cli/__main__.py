"""``python -m autosched.cli``: the ``autosched`` command."""

import sys

from autosched.cli import main

sys.exit(main())
