#!/usr/bin/env python3
"""Slow clients against a SCIM service on this machine, and what they hold of it.

Opens COUNT connections to ADDRESS (loopback only), in three equal kinds that never send a
bearer token: silent TCP connections, TLS connections that trickle one header byte a second,
and TLS connections that send 300 KB of headers that never end. Then, at fixed moments, prints
the service's resident memory (VmRSS of PID, in MiB) and how many of the connections the
service still keeps open (established TCP connections to its port, from `ss`). Bounded: it
opens COUNT connections once, runs for SECONDS, then closes everything and exits.

    slow-clients.py ADDRESS PID [COUNT] [SECONDS]      # 127.0.0.1:8443 12345 1000 80
"""

import asyncio
import ssl
import subprocess
import sys
import time

HEADER = b"GET /scim/v2/Users HTTP/1.1\r\nHost: scim\r\n"
BIG_HEADERS = 300 * 1024


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def established(port: int) -> int:
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
        capture_output=True, text=True, check=True,
    ).stdout
    return len([line for line in out.splitlines() if line.strip()])


async def silent(host, port, stop):
    reader, writer = await asyncio.open_connection(host, port)
    await stop.wait()
    writer.close()


def tls_context():
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def trickle(host, port, stop):
    reader, writer = await asyncio.open_connection(host, port, ssl=tls_context())
    writer.write(HEADER)
    while not stop.is_set():
        writer.write(b"X-Slow: a\r\n")
        try:
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
        await asyncio.sleep(1)
    writer.close()


async def big(host, port, stop):
    reader, writer = await asyncio.open_connection(host, port, ssl=tls_context())
    writer.write(HEADER)
    sent = 0
    line = b"X-Big: " + b"a" * 1000 + b"\r\n"
    while sent < BIG_HEADERS and not stop.is_set():
        writer.write(line)
        sent += len(line)
        try:
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
    await stop.wait()
    writer.close()


async def main():
    address, pid = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 80
    host, port = address.rsplit(":", 1)
    port = int(port)
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"
    stop = asyncio.Event()
    print(f"before: rss {rss_mib(pid):.1f} MiB, open {established(port)}")
    started = time.monotonic()
    tasks = []
    for i in range(count):
        kind = (silent, trickle, big)[i % 3]
        tasks.append(asyncio.create_task(kind(host, port, stop)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    peak = 0.0
    for at in (5, 15, 30, 45, 60, 75):
        if at > seconds:
            break
        while time.monotonic() - started < at:
            peak = max(peak, rss_mib(pid))
            await asyncio.sleep(0.25)
        peak = max(peak, rss_mib(pid))
        print(f"{at:>3} s: rss {rss_mib(pid):.1f} MiB, open {established(port)}, peak rss {peak:.1f} MiB")
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failed = sum(1 for r in results if isinstance(r, BaseException))
    print(f"{count} connections ({failed} refused or cut by the service), peak rss {peak:.1f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
