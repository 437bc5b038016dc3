"""``python -m mxformats.specgen [--check]``: regenerate spec/ or check it for drift."""

from mxformats.specgen import main

raise SystemExit(main())
