"""Runs every scim2-tester check against a SCIM service and prints one line per check.

Usage: check.py URL TOKEN_FILE CA_FILE. Exits 1 if any check ends in ERROR; SKIPPED checks
(features the service does not advertise) are listed with their reason.
"""

import collections
import sys

import httpx2
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server


def main() -> int:
    url, token_file, ca_file = sys.argv[1:4]
    token = open(token_file).read().strip().splitlines()[0]
    http = httpx2.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {token}"},
        verify=ca_file,
    )
    client = SyncSCIMClient(http)
    results = check_server(client)
    counts = collections.Counter()
    for result in results:
        counts[result.status.name] += 1
        line = f"{result.status.name:8} {result.title}"
        if result.resource_type:
            line += f" [{result.resource_type}]"
        print(line)
        if result.status != Status.SUCCESS and result.reason:
            print(f"         {result.reason}")
    print(f"scim2-tester against {url}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 1 if counts[Status.ERROR.name] or not results else 0


if __name__ == "__main__":
    sys.exit(main())
