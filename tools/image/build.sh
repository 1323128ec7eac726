#!/usr/bin/env bash
# Builds Homestead's image with no registry and no container engine: the two binaries
# (`homestead`, and `homestead-operator` from beside it, which the operator's Pods run), the
# shared libraries they link (from this machine, as ldd lists them), and /etc/passwd naming uid 65532,
# packed by tools/image/oci.sh. The image runs as 65532:65532 and needs no writable path, so it
# runs with a read-only root filesystem. (The Dockerfile builds the same for people with a
# registry.)
#
#   build.sh <homestead-binary> <archive.tar> <tag>    (homestead-operator beside the binary)
#
# Prints the archive's path. `ctr images import --base-name homestead.local/homestead` loads it
# as homestead.local/homestead:<tag>.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 <homestead-binary> <archive.tar> <tag>" >&2; exit 2; }
binary=$1 archive=$2 tag=$3
operator=$(dirname "$binary")/homestead-operator
[ -x "$operator" ] || { echo "$0: $operator is missing: build both (cargo build -p homestead --bins)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc"
# Without debug information: the debug build the tests use shrinks tenfold.
objcopy --strip-debug "$binary" "$root/usr/local/bin/homestead"
objcopy --strip-debug "$operator" "$root/usr/local/bin/homestead-operator"
# The dynamic loader and every library ldd resolves for either binary, at the same paths.
ldd "$binary" "$operator" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$root/etc/passwd"
echo 'nonroot:x:65532:' >"$root/etc/group"
mkdir -p "$(dirname "$archive")"
"$here/oci.sh" "$root" "$archive" "$tag" 65532:65532 /usr/local/bin/homestead
echo "$archive"
