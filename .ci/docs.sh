#!/usr/bin/env bash
# The documentation site (issue 7): `bash .ci/docs.sh` from the repository root, with the test
# venv active and the `docs` extra installed. Checks the committed generated pages for drift,
# builds the site strictly (warnings are errors, nitpicky references), then opens it in
# headless Chromium (docs/browser_check.py) and proves that check can fail. Screenshots and the
# DOM of each checked page: docs/_build/screenshots/. No network is used.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SITE=docs/_build/html
SHOTS=docs/_build/screenshots

echo "==> docs: generated pages (docs/cli.md, docs/validate-checks.md) match the code"
python docs/generate.py --check

echo "==> docs: sphinx-build -W --keep-going -n (fresh)"
rm -rf docs/_build
start=$SECONDS
MPLBACKEND=Agg sphinx-build -W --keep-going -n -q -b html docs "$SITE"
echo "--> built in $((SECONDS - start))s"

echo "==> docs: headless Chromium on the built site"
start=$SECONDS
python docs/browser_check.py --site "$SITE" --screenshots "$SHOTS"
python docs/browser_check.py --site "$SITE" --planted
echo "--> browser checks in $((SECONDS - start))s; screenshots in $(pwd)/$SHOTS"
