"""A reconnecting idle-socket flood as a process of its own, as an attacker's would be:

    python -m tests.security.flood 127.0.0.1:PORT SOCKETS BUDGET SECONDS [SOURCE]

It prints `filled` once every socket was opened, then `opened N` when it ends: after BUDGET
connections in all or SECONDS, whichever comes first; SOURCE is the loopback address the
flood comes from (127.0.0.2: another host, as far as the server can tell). Loopback only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys

from tests.security.harness import reconnecting_flood


async def main(address: str, sockets: int, budget: int, seconds: float, source: str | None) -> None:
    host = address.rsplit(":", 1)[0]
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to flood {host}: loopback only")
    async with reconnecting_flood(address, sockets, budget, source) as flood:
        try:
            async with asyncio.timeout(seconds):
                await flood.filled.wait()
                print("filled", flush=True)
                await flood.spent.wait()
        except TimeoutError:
            pass
    print(f"opened {flood.opened}", flush=True)


if __name__ == "__main__":
    address, sockets, budget, seconds = sys.argv[1:5]
    source = sys.argv[5] if len(sys.argv) > 5 else None
    asyncio.run(main(address, int(sockets), int(budget), float(seconds), source))
