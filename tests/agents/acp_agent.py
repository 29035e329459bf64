#!/usr/bin/env python3
# A tiny ACP agent (JSON-RPC 2.0, one message per line on stdio) for the tests of
# `[[agent]] protocol = "acp"`: it answers initialize and session/new (keeping the mcpServers it
# was given in $ACP_AGENT_LOG), and on session/prompt asks session/request_permission for a
# shell command, runs it only when an allow option is selected, writes its report to
# $CAESAR_REPORT_PATH and ends the turn. It knows nothing of caesar beyond ACP itself.
import json, os, subprocess, sys

LOG = os.environ.get("ACP_AGENT_LOG")
COMMAND = os.environ.get("ACP_AGENT_COMMAND", "echo acp > acp.txt")


def log(entry):
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def update(session, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})


session = "acp-test-session"
while True:
    msg = read()
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        log({"session/new": msg["params"]})
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": session}})
    elif method == "session/prompt":
        log({"prompt": msg["params"]["prompt"][0]["text"][:200]})
        update(session, "I will run a command.")
        send({"jsonrpc": "2.0", "id": 100, "method": "session/request_permission", "params": {
            "sessionId": session,
            "toolCall": {"toolCallId": "call-1", "title": COMMAND, "kind": "execute", "status": "pending",
                         "rawInput": {"command": COMMAND}},
            "options": [{"optionId": "yes-once", "name": "Run it", "kind": "allow_once"},
                        {"optionId": "yes-always", "name": "Always run", "kind": "allow_always"},
                        {"optionId": "no", "name": "Do not run", "kind": "reject_once"}]}})
        answer = read()
        while answer.get("id") != 100:
            answer = read()
        log({"permission": answer.get("result")})
        outcome = (answer.get("result") or {}).get("outcome") or {}
        allowed = outcome.get("outcome") == "selected" and outcome.get("optionId", "").startswith("yes")
        if allowed:
            subprocess.run(COMMAND, shell=True, check=False)
        status = "success" if allowed else "blocked"
        summary = "Ran the command." if allowed else "The command was not allowed."
        report = {"protocol": "caesar.report/v1", "status": status, "summary": summary,
                  "changes": [], "findings": [], "next_steps": []}
        if os.environ.get("CAESAR_REPORT_PATH"):
            with open(os.environ["CAESAR_REPORT_PATH"], "w") as f:
                json.dump(report, f)
        update(session, summary)
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
