"""``python -m mxformats``: the command line (:func:`mxformats.cli.main`)."""

import sys

from mxformats.cli import main

sys.exit(main())
