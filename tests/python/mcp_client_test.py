#!/usr/bin/env python3
"""Drives caesar-mcp with the official Python MCP SDK (`pip install mcp`).

Run by tests/tests/mcp.rs, which sets:
  CAESAR_MCP_BIN         the caesar-mcp binary
  CAESAR_TEST_WORKSPACE  a project whose .caesar/config.toml declares the agent
  CAESAR_TEST_AGENT      a fake agent that reports success
  CAESAR_HOME            the test installation (a daemon is running there)

It initializes, lists the tools and checks every schema against the JSON
Schema meta-schema, delegates to the agent and awaits it, validating each
structuredContent against the tool's outputSchema, and checks one error.
Prints "python mcp client: ok" on success; any failure raises.
"""

import asyncio
import json
import os
import sys

try:
    import jsonschema
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
except ImportError as e:  # the Rust test turns this into a failure
    print(f"the Python MCP SDK is missing ({e}): pip install mcp", file=sys.stderr)
    sys.exit(3)

TOOLS = {
    "caesar_delegate",
    "caesar_await",
    "caesar_status",
    "caesar_logs",
    "caesar_cancel",
    "caesar_diff",
    "caesar_apply",
    "caesar_list_agents",
    "caesar_list_roles",
    "caesar_answer",
    "caesar_describe_agent",
    "caesar_steer",
}


def structured(result, schema):
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None, "structuredContent is set"
    assert json.loads(result.content[0].text) == data, "text block == structuredContent"
    jsonschema.validate(data, schema)
    return data


async def main():
    workspace = os.environ["CAESAR_TEST_WORKSPACE"]
    agent = os.environ["CAESAR_TEST_AGENT"]
    params = StdioServerParameters(
        command=os.environ["CAESAR_MCP_BIN"],
        args=["--root", workspace],
        env=dict(os.environ),
        cwd=workspace,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "caesar", init
            tools = (await session.list_tools()).tools
            assert {t.name for t in tools} == TOOLS, [t.name for t in tools]
            schemas = {}
            for t in tools:
                for kind, schema in (("input", t.input_schema), ("output", t.output_schema)):
                    assert schema is not None, f"{t.name} has an {kind} schema"
                    jsonschema.Draft202012Validator.check_schema(schema)
                    assert schema.get("type") == "object", (t.name, kind)
                schemas[t.name] = t.output_schema
                assert t.annotations is not None, t.name
            status_tool = next(t for t in tools if t.name == "caesar_status")
            assert status_tool.annotations.read_only_hint is True
            cancel_tool = next(t for t in tools if t.name == "caesar_cancel")
            assert cancel_tool.annotations.destructive_hint is True

            d = structured(
                await session.call_tool(
                    "caesar_delegate", {"objective": "say hello", "agent": agent, "timeout": "2m"}
                ),
                schemas["caesar_delegate"],
            )
            assert d["status"] == "running" and d["agent"] == agent, d
            task_id = d["task_id"]

            a = structured(
                await session.call_tool("caesar_await", {"task_ids": [task_id], "timeout_ms": 30000}),
                schemas["caesar_await"],
            )
            t = a["tasks"][task_id]
            assert t["status"] == "succeeded", t
            assert t["pending"] is False, t
            assert t["report"]["summary"] == "python done", t

            s = structured(
                await session.call_tool("caesar_status", {"task_id": task_id}),
                schemas["caesar_status"],
            )
            assert s["report_status"] == "success", s

            logs = structured(
                await session.call_tool("caesar_logs", {"task_id": task_id, "raw": True}),
                schemas["caesar_logs"],
            )
            assert "hello" in logs["text"], logs

            bad = await session.call_tool("caesar_status", {"task_id": "t_000000000000"})
            assert bad.is_error, bad
            assert len(bad.content) == 1 and bad.content[0].text.startswith("not_found: "), bad
    print("python mcp client: ok")


if __name__ == "__main__":
    asyncio.run(main())
