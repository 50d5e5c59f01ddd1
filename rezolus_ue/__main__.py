"""``python -m rezolus_ue`` is ``rezolus-ue``."""

import sys

from .cli import main

sys.exit(main())
