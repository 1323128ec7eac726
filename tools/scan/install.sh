#!/usr/bin/env bash
# Installs the manifest scanners platform teams run, none of them written here, at pinned
# versions into $HOMESTEAD_CACHE (default ~/.cache/homestead), once: kube-score from its Go
# module, checkov from PyPI (requirements.txt, in a virtualenv). Prints the directory holding
# both binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kube_score=v1.20.0
cache=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools
dest=$cache/scanners-$kube_score-$(sha256sum "$here/requirements.txt" | cut -c1-12)
if [ ! -x "$dest/bin/checkov" ] || [ ! -x "$dest/bin/kube-score" ]; then
  echo "installing kube-score $kube_score (Go module) and checkov (PyPI) once" >&2
  rm -rf "$dest.tmp"
  python3 -m venv "$dest.tmp"
  "$dest.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  GOBIN="$dest.tmp/bin" GOFLAGS=-mod=mod CGO_ENABLED=0 \
    go install "github.com/zegl/kube-score/cmd/kube-score@$kube_score" >&2
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  # A virtualenv's scripts name its own path; it moved.
  sed -i "1s|^#!.*python.*|#!$dest/bin/python|" "$dest"/bin/checkov
fi
echo "$dest/bin"
