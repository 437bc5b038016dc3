"""``python -m mxformats.specgen [--check]``: regenerate spec/ or check it for drift."""

from mxformats.specgen import main

if __name__ == "__main__":
    raise SystemExit(main())
