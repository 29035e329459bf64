#!/usr/bin/env python3
"""Drives caesar-mcp (stdio) and caesard's HTTP endpoint with the official
Python MCP SDK's high-level `mcp.Client`, which probes `server/discover` and
speaks MCP 2026-07-28 (stateless: per-request `_meta`, no initialize, no
roots) when the server offers it. mcp 2.3.0 is the first release with it.

Run by tests/tests/mcp_revisions.rs, which sets:
  CAESAR_MCP_BIN         the caesar-mcp binary (the stdio leg)
  CAESAR_TEST_URL        http://127.0.0.1:<port>/mcp (the HTTP leg)
  CAESAR_TEST_TOKEN      its bearer token
  CAESAR_TEST_WORKSPACE  a project whose .caesar/config.toml declares the agent
  CAESAR_TEST_AGENT      a fake agent that reports "modern done"

Prints "python modern client: ok" on success; any failure raises.
"""

import asyncio
import os
import sys

try:
    import mcp
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
except ImportError as e:  # the Rust test turns this into a failure
    print(f"the Python MCP SDK is missing ({e}): pip install mcp==2.3.0", file=sys.stderr)
    sys.exit(3)

REVISION = "2026-07-28"
WORKSPACE = os.environ["CAESAR_TEST_WORKSPACE"]
AGENT = os.environ["CAESAR_TEST_AGENT"]


async def exercise(client, leg, workspace_arg):
    assert client.protocol_version == REVISION, (leg, client.protocol_version)
    tools = {t.name for t in (await client.list_tools()).tools}
    assert "caesar_delegate" in tools and "caesar_await" in tools and len(tools) == 12, (leg, tools)  # with caesar_steer (issue 31)
    args = {"objective": f"modern over {leg}", "agent": AGENT}
    if workspace_arg:
        args["workspace"] = WORKSPACE
    d = await client.call_tool("caesar_delegate", args)
    assert not d.is_error, (leg, d.content)
    task_id = d.structured_content["task_id"]
    # No roots in this revision: the workspace is the cwd (stdio) or the argument (HTTP).
    assert d.structured_content["workspace"] == WORKSPACE, (leg, d.structured_content)
    progress = []

    async def on_progress(p, total, message):
        progress.append((p, message))

    a = await client.call_tool(
        "caesar_await", {"task_ids": [task_id], "timeout_ms": 30000}, progress_callback=on_progress
    )
    assert not a.is_error, (leg, a.content)
    task = a.structured_content["tasks"][task_id]
    assert task["status"] == "succeeded", (leg, task)
    assert task["report"]["summary"] == "modern done", (leg, task)
    assert progress, (leg, "progress during caesar_await")
    missing = await client.call_tool("caesar_status", {"task_id": "t_000000000000"})
    assert missing.is_error and missing.content[0].text.startswith("not_found: "), (leg, missing.content)


async def main():
    params = StdioServerParameters(
        command=os.environ["CAESAR_MCP_BIN"], args=[], env=dict(os.environ), cwd=WORKSPACE
    )
    async with Client(params) as client:
        await exercise(client, "stdio", False)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {os.environ['CAESAR_TEST_TOKEN']}"})
    async with http:
        async with Client(streamable_http_client(os.environ["CAESAR_TEST_URL"], http_client=http)) as client:
            await exercise(client, "http", True)
    print(f"python modern client: ok (mcp {mcp.__version__ if hasattr(mcp, '__version__') else '2.x'})")


asyncio.run(main())
