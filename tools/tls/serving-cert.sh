#!/usr/bin/env bash
# Makes a local CA and a serving certificate it signs (ECDSA P-256, 30 days), for the local
# cluster's Services: DIR/PREFIX-ca.crt (and .key), DIR/PREFIX.crt and DIR/PREFIX.key (mode 600).
#
#   serving-cert.sh <dir> <prefix> <ca-name> <dns-name> [dns-name...]
#
# The certificate's common name is the first DNS name; every DNS name is a subjectAltName.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 <dir> <prefix> <ca-name> <dns-name> [dns-name...]" >&2; exit 2; }
dir=$1 prefix=$2 ca_name=$3
shift 3
names=$(printf 'DNS:%s,' "$@")
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/CN=$ca_name" -keyout "$dir/$prefix-ca.key" -out "$dir/$prefix-ca.crt" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
  -keyout "$dir/$prefix.key" -out "$dir/$prefix.csr" 2>/dev/null
openssl x509 -req -in "$dir/$prefix.csr" -CA "$dir/$prefix-ca.crt" -CAkey "$dir/$prefix-ca.key" \
  -CAcreateserial -days 30 -extfile <(printf 'subjectAltName=%s' "${names%,}") \
  -out "$dir/$prefix.crt" 2>/dev/null
chmod 600 "$dir/$prefix-ca.key" "$dir/$prefix.key"
