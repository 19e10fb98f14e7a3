#!/usr/bin/env bash
# Chromium for the viewer's browser test (tests/tools/test_viewer_browser.py), from the
# distribution's packages (Debian 12: apt-get install chromium); never a browser download.
#
#   scripts/setup_browser.sh
#
# Idempotent: nothing to do when a Chromium is on PATH (or LINGBOT_CHROMIUM names one).
# Installs it as root (or with sudo when there is one); under CI (CI=true) a Chromium that
# cannot be installed fails `make test`, elsewhere the browser test then skips and says why.
set -euo pipefail

for b in "${LINGBOT_CHROMIUM:-}" chromium chromium-browser; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi
if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    echo "setup_browser.sh: installing chromium (apt-get) for the viewer's browser test"
    if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
       || { $SUDO apt-get update -q >/dev/null \
            && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
               >/dev/null; }; then
        exit 0
    fi
fi
if [ "${CI:-}" = "true" ]; then
    echo "setup_browser.sh: chromium is missing and could not be installed (apt-get install" \
         "chromium, as root); under CI the viewer's browser test needs it" >&2
    exit 1
fi
echo "setup_browser.sh: no chromium (apt-get install chromium): the viewer's browser test" \
     "will skip"
