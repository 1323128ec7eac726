#!/usr/bin/env bash
# Packs a directory into an OCI image archive with umoci (Debian package), with no registry and
# no container engine: the way this project makes its images.
#
#   oci.sh <rootfs-dir> <archive.tar> <tag> <user> <entrypoint> [arg...]
#
# The archive holds one image whose reference name is <tag>; `ctr images import --base-name
# <repository> <archive.tar>` names it <repository>:<tag>. Files are owned by root; the image
# runs as <user> (uid:gid).
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 <rootfs-dir> <archive.tar> <tag> <user> <entrypoint> [arg...]" >&2; exit 2; }
rootfs=$1 archive=$2 tag=$3 user=$4
shift 4
command -v umoci >/dev/null || { echo "umoci is missing: apt-get install umoci" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umoci init --layout "$work/layout"
umoci new --image "$work/layout:$tag"
umoci unpack --image "$work/layout:$tag" "$work/bundle" >/dev/null
cp -a "$rootfs/." "$work/bundle/rootfs/"
umoci repack --image "$work/layout:$tag" "$work/bundle"
config=(--config.user "$user")
for arg in "$@"; do config+=(--config.entrypoint "$arg"); done
umoci config --image "$work/layout:$tag" "${config[@]}"
umoci gc --layout "$work/layout"
tar -C "$work/layout" -cf "$archive.partial" .
mv "$archive.partial" "$archive"
