#!/usr/bin/env python3
"""Drives caesard's MCP over streamable HTTP with the official Python MCP SDK.

Run by tests/tests/http.rs, which sets:
  CAESAR_TEST_URL        http://127.0.0.1:<port>/mcp
  CAESAR_TEST_TOKEN      the bearer token
  CAESAR_TEST_WORKSPACE  a project whose .caesar/config.toml declares the agent
  CAESAR_TEST_AGENT      a fake agent that reports success

Prints "python http client: ok" on success; any failure raises.
"""

import asyncio
import os
import sys

try:
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
except ImportError as e:
    print(f"the Python MCP SDK is missing ({e}): pip install mcp", file=sys.stderr)
    sys.exit(3)

URL = os.environ["CAESAR_TEST_URL"]
TOKEN = os.environ["CAESAR_TEST_TOKEN"]
WORKSPACE = os.environ["CAESAR_TEST_WORKSPACE"]
AGENT = os.environ["CAESAR_TEST_AGENT"]


async def session(url, check):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write, *_):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                assert init.server_info.name == "caesar", init.server_info
                await check(s)


async def full(s):
    tools = {t.name for t in (await s.list_tools()).tools}
    assert "caesar_delegate" in tools and len(tools) == 12, tools  # the contract's ten, caesar_list_roles and caesar_steer (issue 31)
    d = await s.call_tool("caesar_delegate", {"objective": "over http", "agent": AGENT, "workspace": WORKSPACE})
    assert not d.is_error, d.content
    task_id = d.structured_content["task_id"]
    a = await s.call_tool("caesar_await", {"task_ids": [task_id], "timeout_ms": 30000})
    assert not a.is_error, a.content
    task = a.structured_content["tasks"][task_id]
    assert task["status"] == "succeeded", task
    assert task["report"]["summary"] == "over http", task
    missing = await s.call_tool("caesar_status", {"task_id": "t_000000000000"})
    assert missing.is_error and missing.content[0].text.startswith("not_found: "), missing.content


async def readonly(s):
    tools = {t.name for t in (await s.list_tools()).tools}
    assert "caesar_delegate" not in tools and "caesar_status" in tools, tools


async def main():
    await session(URL, full)
    await session(URL + "?profile=readonly", readonly)
    print("python http client: ok")


asyncio.run(main())
