#!/usr/bin/env bash
# Builds Homestead's image with no registry and no container engine: the binary, the shared
# libraries it links (from this machine, as ldd lists them), and /etc/passwd naming uid 65532,
# packed by tools/image/oci.sh. The image runs as 65532:65532 and needs no writable path, so it
# runs with a read-only root filesystem. (The Dockerfile builds the same for people with a
# registry.)
#
#   build.sh <homestead-binary> <archive.tar> <tag>
#
# Prints the archive's path. `ctr images import --base-name homestead.local/homestead` loads it
# as homestead.local/homestead:<tag>.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 <homestead-binary> <archive.tar> <tag>" >&2; exit 2; }
binary=$1 archive=$2 tag=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc"
# Without debug information: the debug build the tests use shrinks tenfold.
objcopy --strip-debug "$binary" "$root/usr/local/bin/homestead"
# The dynamic loader and every library ldd resolves, at the same paths.
ldd "$binary" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$root/etc/passwd"
echo 'nonroot:x:65532:' >"$root/etc/group"
mkdir -p "$(dirname "$archive")"
"$here/oci.sh" "$root" "$archive" "$tag" 65532:65532 /usr/local/bin/homestead
echo "$archive"
