#!/usr/bin/env bash
# Installs Debian's Chromium for the rendered-book tests (tests/rendered), once.
set -euo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian package chromium (for the browser test)" >&2
  (apt-get install -y -qq chromium >/dev/null 2>&1) || \
    { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }
else
  echo "Chromium is missing: run 'sudo apt-get install chromium' (the browser test drives it)" >&2
  exit 1
fi
