#!/usr/bin/env python3
"""Cold start of caesar-mcp: spawn, initialize, tools/list answered.

Usage: CAESAR_HOME=<dir with a running daemon> python3 tests/python/cold_start.py [caesar-mcp] [runs]
Prints min, median and max in milliseconds. Needs nothing beyond Python.
"""

import json
import statistics
import subprocess
import sys
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/caesar-mcp"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
REST = [{"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]


def line(msg):
    return (json.dumps(msg) + "\n").encode()


times = []
for _ in range(RUNS):
    start = time.perf_counter()
    p = subprocess.Popen([BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdin.write(line(INIT))
    p.stdin.flush()
    p.stdout.readline()
    p.stdin.write(b"".join(line(m) for m in REST))
    p.stdin.flush()
    answer = p.stdout.readline()
    times.append((time.perf_counter() - start) * 1000)
    assert b"caesar_delegate" in answer, answer
    p.stdin.close()
    p.wait()
times.sort()
print(f"cold start ({BIN}, {RUNS} runs): min {times[0]:.1f} median {statistics.median(times):.1f} max {times[-1]:.1f} ms")
