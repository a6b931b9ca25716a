"""Event-loop lag seen from outside: `/healthz` latency, sampled from a separate process.

    python -m bench.probe --port P --seconds S [--interval 0.02]

Prints one JSON list of [wall time at send (s), latency (ms)] when done. It runs in its own
process, blocking and single-threaded, so the load generator's own loop lag is not in it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args()
    samples: list[tuple[float, float]] = []
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=10)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        wall, started = time.time(), time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=10)
            continue
        samples.append((wall, (time.perf_counter() - started) * 1000))
        time.sleep(args.interval)
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
