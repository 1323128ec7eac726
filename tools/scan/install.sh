#!/usr/bin/env bash
# Installs the manifest scanners platform teams run, none of them written here, at pinned
# versions into $HOMESTEAD_CACHE (default ~/.cache/homestead), once: kube-score and kubeconform
# from their Go modules, checkov and openapi2jsonschema (for kubeconform's schemas) from PyPI
# (requirements.txt, in a virtualenv). Prints the directory holding the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kube_score=v1.20.0
kubeconform=v0.8.0
cache=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools
dest=$cache/scanners-$kube_score-$kubeconform-$(sha256sum "$here/requirements.txt" | cut -c1-12)
# Callers in parallel: one installs, the others wait for it.
mkdir -p "$cache"
exec 9>"$dest.lock"
flock 9
if [ ! -x "$dest/bin/checkov" ] || [ ! -x "$dest/bin/kubeconform" ]; then
  echo "installing kube-score $kube_score, kubeconform $kubeconform (Go modules) and checkov (PyPI) once" >&2
  rm -rf "$dest.tmp"
  python3 -m venv "$dest.tmp"
  "$dest.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  for tool in "github.com/zegl/kube-score/cmd/kube-score@$kube_score" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform"; do
    GOBIN="$dest.tmp/bin" GOFLAGS=-mod=mod CGO_ENABLED=0 go install "$tool" >&2
  done
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  # A virtualenv's scripts name its own path; it moved.
  sed -i "1s|^#!.*python.*|#!$dest/bin/python|" "$dest"/bin/checkov "$dest"/bin/openapi2jsonschema
fi
echo "$dest/bin"
