#!/usr/bin/env bash
# Installs the offline datasets (README, Data) into the data root, once each.
# Fashion-MNIST comes from Debian's dataset-fashion-mnist, laid out as torchvision expects;
# every tools/data/*.sh then installs one more source (each skips itself when done).
set -euo pipefail
root="${1:-${HETFL_DATA:-$HOME/.cache/hetfl}}"
raw="$root/FashionMNIST/raw"
files="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
have=1
for f in $files; do [ -s "$raw/$f" ] || have=0; done
if [ "$have" = 0 ]; then
  src=/usr/share/datasets/fashion-mnist
  if [ ! -s "$src/train-images-idx3-ubyte.gz" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing Debian package dataset-fashion-mnist" >&2
      (apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1) || \
        { apt-get update -qq >/dev/null && apt-get install -y -qq dataset-fashion-mnist >/dev/null; }
    else
      echo "Fashion-MNIST is missing: run 'sudo apt-get install dataset-fashion-mnist' or set HETFL_DATA to a folder holding FashionMNIST/raw" >&2
      exit 1
    fi
  fi
  mkdir -p "$raw"
  for f in $files; do
    gunzip -c "$src/$f.gz" > "$raw/$f.tmp" && mv "$raw/$f.tmp" "$raw/$f"
  done
  echo "Fashion-MNIST ready in $raw" >&2
fi
for extra in "$(dirname "$0")"/data/*.sh; do
  [ -e "$extra" ] && bash "$extra" "$root"
done
exit 0
