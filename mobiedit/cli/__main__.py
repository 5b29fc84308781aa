"""``python -m mobiedit.cli``: the ``mobiedit`` console script."""
import sys

from . import main

sys.exit(main())
