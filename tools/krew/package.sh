#!/usr/bin/env bash
# Packages BINARY (a linux/amd64 build of homestead) as kubectl's homestead plugin for krew: writes
# OUT/kubectl-homestead_linux_amd64.tar.gz (the binary as kubectl-homestead) and OUT/homestead.yaml,
# plugins/homestead.yaml with the archive's address (BASE_URL/<archive>) and sha256 filled in.
#
#   package.sh BINARY OUT BASE_URL
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 BINARY OUT BASE_URL" >&2; exit 2; }
binary=$1 out=$2 base=${3%/}
root=$(cd "$(dirname "$0")/../.." && pwd)
archive=kubectl-homestead_linux_amd64.tar.gz
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/kubectl-homestead"
# Reproducible for one binary: fixed owner, mode and time, no extended attributes.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --no-xattrs \
  -C "$stage" -cf - kubectl-homestead | gzip -n >"$out/$archive"
sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
sed -e "s|^      uri: URI\$|      uri: $base/$archive|" -e "s|^      sha256: SHA256\$|      sha256: \"$sha\"|" \
  "$root/plugins/homestead.yaml" >"$out/homestead.yaml"
grep -q "sha256: \"$sha\"" "$out/homestead.yaml" || { echo "plugins/homestead.yaml has no SHA256 line to fill" >&2; exit 1; }
echo "$out/$archive"
echo "$out/homestead.yaml"
