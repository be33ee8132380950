"""``python -m parl`` runs the ``parl`` command (see :mod:`parl.cli`)."""

import sys

from parl.cli import main

sys.exit(main())
