#!/usr/bin/env bash
# The King James Version and the World English Bible as SWORD zText modules, for the
# KJV/WEB sentence-pair task (hetfl_core/science/data/bible.py). Source: Debian's
# sword-text-kjv and sword-text-web, fetched with `apt-get download` (no root needed,
# nothing installed system-wide) and unpacked with dpkg-deb; the SWORD tree
# (mods.d/ and modules/) is kept under $1/bible/.
set -euo pipefail
root="${1:-${HETFL_DATA:-$HOME/.cache/hetfl}}"
dest="$root/bible"
kjv="$dest/modules/texts/ztext/engKJV2006eb"
web="$dest/modules/texts/ztext/engWEB2015eb"
if [ -s "$kjv/nt.bzz" ] && [ -s "$web/nt.bzz" ]; then
  exit 0
fi
# Already installed system-wide (apt-get install sword-text-kjv sword-text-web)?
if [ -s /usr/share/sword/modules/texts/ztext/engKJV2006eb/nt.bzz ] && \
   [ -s /usr/share/sword/modules/texts/ztext/engWEB2015eb/nt.bzz ]; then
  mkdir -p "$dest/mods.d" "$dest/modules/texts/ztext"
  cp /usr/share/sword/mods.d/engKJV2006eb.conf /usr/share/sword/mods.d/engWEB2015eb.conf "$dest/mods.d/"
  cp -r /usr/share/sword/modules/texts/ztext/engKJV2006eb /usr/share/sword/modules/texts/ztext/engWEB2015eb \
    "$dest/modules/texts/ztext/"
  echo "Bible modules copied into $dest" >&2
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fetch() { (cd "$tmp" && apt-get download -qq sword-text-kjv sword-text-web >/dev/null 2>&1); }
if ! fetch; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null && fetch
  else
    echo "cannot fetch the Debian packages sword-text-kjv and sword-text-web: run 'sudo apt-get update' and retry, or install them with apt-get" >&2
    exit 1
  fi
fi
for deb in "$tmp"/sword-text-*.deb; do
  dpkg-deb -x "$deb" "$tmp/x"
done
mkdir -p "$dest"
cp -r "$tmp/x/usr/share/sword/mods.d" "$tmp/x/usr/share/sword/modules" "$dest/"
echo "Bible modules (KJV, WEB) ready in $dest" >&2
