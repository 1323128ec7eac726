#!/usr/bin/env python3
"""The rows of a heap table in docs/performance.md ("A leaner echo memory and group
memberships") from a heap profile.

Usage: heap-table.py PROFILE.zst

PROFILE is one of the files `HOMESTEAD_BENCH_HEAPTRACK=FILE` writes (docs/performance.md, "At
scale"): an operator built without jemalloc, killed with SIGKILL, so that what heaptrack calls
leaked is the heap live at that moment. heaptrack_print (the Debian package heaptrack) lists
every live allocation with its whole stack; each is attributed to its innermost frame outside
the standard library and the crates that only hold or copy what others allocate (serde,
serde_json, hashbrown, smallvec, bytes, indexmap, the allocator): the inlined release build names
the file more reliably than the function. The files are grouped into the rows below. Sizes are
the bytes the program asked for, printed in MiB (heaptrack_print writes them in decimal units:
K is 1,000 bytes), not the allocator's size classes or the pages they touch.
"""

import collections
import re
import subprocess
import sys

# heaptrack_print divides by 1,000 (its formatBytes).
UNIT = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9}
HEAD = re.compile(r"^([\d.]+)([BKMG]) leaked over (\d+) calls from")
AT = re.compile(r"^\s+at (\S+):(\d+)")
# Frames that say where an allocation was made, not what for.
SKIP = ("library/", "/rust/deps/", "/rustc/", "serde-", "serde_json-", "hashbrown-",
        "allocator", "smallvec-", "bytes-1", "indexmap-")
CONNECTIONS = "connections (hyper, rustls, codecs)"
ROWS = [
    ("the compact caches' keys and B-tree nodes (store.rs, dense.rs)",
     ("model/src/store.rs", "model/src/dense.rs")),
    ("Users, Shares and Workspaces packed (lz4_flex)", ("lz4_flex",)),
    ("record contents (cache.rs, facts.rs)", ("state/cache.rs", "plan/facts.rs")),
    ("reflector caches (DirectoryGroups, Profiles, quotas; Workspaces before 1add878)",
     ("reflector/store.rs", "object_meta.rs", "api/src/", "kube-core", "reflector/object_ref.rs",
      "condition.rs", "resource_quota", "ahash")),
    ("indexes (identities, names, Profiles)", ("identity.rs", "names.rs", "state/index.rs")),
    (CONNECTIONS,
     ("hyper", "bytes_mut.rs", "src/msgs/", "src/crypto/", "rustls", "framed_impl", "codec",
      "client/tls13", "limited_cache", "src/conn.rs")),
    ("Controllers and channels (scheduler, runner, channels)",
     ("scheduler.rs", "future_hash_map", "slab-", "wheel", "mpsc", "futures-util",
      "futures-channel", "runtime/keyed.rs", "runtime/backlog.rs")),
    ("echo memory (recent.rs)", ("act/recent.rs",)),
    ("the watches' own state (watches.rs)", ("runtime/watches.rs",)),
    ("Events", (("kube-runtime-", "/src/events.rs"), "events/v1")),
]


def row_of(frames, text):
    """The row of one live allocation, from its stack's files (innermost first)."""
    chosen = next((f for f in frames if not any(s in f for s in SKIP)),
                  frames[-1] if frames else "?")
    if "mpsc/block.rs" in chosen and "hyper-" in text:
        return CONNECTIONS  # hyper's channel to each connection's task
    for name, files in ROWS:
        # A file is a part of its path, or a tuple of parts that must all be in it.
        if any(all(part in chosen for part in ((f,) if isinstance(f, str) else f)) for f in files):
            return name
    return "other"


def main():
    printed = subprocess.run(
        ["heaptrack_print", "-f", sys.argv[1], "-p", "0", "-a", "0", "-T", "0", "-l", "-m", "0",
         "-n", "1000000", "-s", "1000000"],
        check=True, capture_output=True, text=True).stdout
    rows = collections.Counter()
    size, frames, text = None, [], []
    for line in printed.splitlines() + ["0B leaked over 0 calls from"]:
        head = HEAD.match(line)
        if head:
            if size is not None:
                rows[row_of(frames, "\n".join(text))] += size
            size = float(head.group(1)) * UNIT[head.group(2)]
            frames, text = [], []
        elif size is not None:
            text.append(line)
            at = AT.match(line)
            if at:
                frames.append(at.group(1))
    for name, _ in ROWS + [("other", ())]:
        print(f"{rows[name] / 2**20:6.1f} MiB  {name}")
    print(f"{sum(rows.values()) / 2**20:6.1f} MiB  live heap")


if __name__ == "__main__":
    main()
