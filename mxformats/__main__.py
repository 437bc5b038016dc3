"""``python -m mxformats``: the command line (:func:`mxformats.cli.main`)."""

import sys

from mxformats.cli import main

if __name__ == "__main__":
    sys.exit(main())
