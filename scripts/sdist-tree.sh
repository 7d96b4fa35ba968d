#!/usr/bin/env bash
# Make a build tree from herd's own source tarball, so that `make test`
# builds and tests exactly what `cabal sdist` ships: a module, header,
# script or test missing from herd.cabal then fails the build or the tests.
#
# Usage: scripts/sdist-tree.sh DIR   (prints nothing else on success)
#
# DIR ends up holding the tarball's files and nothing else, besides its
# own dist-newstyle (kept, so that builds stay incremental) and a
# cabal.project naming only it. Files whose bytes did not change keep
# their modification time: GHC 9.0 decides what to recompile by time, and
# the tarball's entries all carry one fixed time.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:?usage: scripts/sdist-tree.sh DIR}"
cabal="${CABAL:-cabal}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$cabal" sdist -o "$work" >/dev/null
tarball="$(ls "$work"/herd-*.tar.gz)"
mkdir -p "$work/unpacked"
tar -xzf "$tarball" -C "$work/unpacked"
src="$(ls -d "$work"/unpacked/herd-*)"

mkdir -p "$target"
# copy what is new or changed (with the time of now), leave the rest alone
(cd "$src" && find . -type f) | while IFS= read -r f; do
  if ! cmp -s "$src/$f" "$target/$f"; then
    mkdir -p "$(dirname "$target/$f")"
    cp "$src/$f" "$target/$f"
    chmod u+w "$target/$f"
  fi
done
# remove what the tarball no longer has
(cd "$target" && find . -path ./dist-newstyle -prune -o -type f -print) | while IFS= read -r f; do
  if [ "$f" != "./cabal.project" ] && [ ! -e "$src/$f" ]; then
    rm -f "$target/$f"
  fi
done
# a project of its own, so that cabal does not look for one further up
if [ ! -e "$target/cabal.project" ]; then
  printf 'packages: .\n' > "$target/cabal.project"
fi
