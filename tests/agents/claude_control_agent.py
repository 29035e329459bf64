#!/usr/bin/env python3
# Stands in for claude in caesar-bench-permissions: it speaks claude's stream-json control
# protocol on stdio (reads the prompt line, then prints `can_use_tool` control requests and
# reads the control responses), stamping CLOCK_MONOTONIC into each request's input so the
# bench can time request -> visible and answer -> response read from what it sees.
import json, re, sys, time

prompt = sys.stdin.readline()  # the prompt (stdin.initial): its objective says `bench <rounds>`
found = re.search(r"bench (\d+)", prompt)
ROUNDS = int(found.group(1)) if found else 100
received = 0
for i in range(ROUNDS):
    req = {"type": "control_request", "request_id": f"bench-{i}", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash",
        "input": {"command": f"echo {i}", "sent_ns": time.monotonic_ns(), "prev_received_ns": received}}}
    sys.stdout.write(json.dumps(req) + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    received = time.monotonic_ns()
    if not line:
        break
# The last response's time, then the end of the turn (after which stdin is closed).
sys.stdout.write(json.dumps({"type": "system", "subtype": "bench_done", "prev_received_ns": received}) + "\n")
sys.stdout.write(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done"}) + "\n")
sys.stdout.flush()
