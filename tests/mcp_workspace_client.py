"""Drives `ken serve` in a workspace with the official MCP Python SDK.

Usage: python3 mcp_workspace_client.py KEN_BINARY WORKSPACE_DIR LONE_REPO
WORKSPACE_DIR holds a ken.toml with the members `service` and `lib` (both
indexed); LONE_REPO is an indexed repository outside any workspace.
Exits non-zero (with a message) on the first failed expectation."""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

KEN, WORKSPACE, LONE = sys.argv[1], sys.argv[2], sys.argv[3]
ENV = {"NO_COLOR": "1", "KEN_SHARED_CACHE": "0", "KEN_CONFIG": "/nonexistent/ken-settings.toml"}


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def structured(result):
    check(not result.is_error, f"tool error: {result.content}")
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def search_schema(session):
    tools = (await session.list_tools()).tools
    return next(t for t in tools if t.name == "codebase_search").input_schema


async def in_workspace():
    params = StdioServerParameters(command=KEN, args=["serve", "--no-watch"], cwd=WORKSPACE, env=ENV)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            check("member" in (await search_schema(session))["properties"], "the member filter is offered")
            both = structured(await session.call_tool(
                "codebase_search", {"query": "backoff delay retry", "mode": "lexical"}))["results"]
            members = {hit.get("member") for hit in both}
            check(members == {"service", "lib"}, f"hits from both members, each named: {both}")
            for hit in both:
                if hit["member"] == "lib":
                    check(hit.get("absolute_path", "").endswith(hit["path"]) and os.path.isfile(hit["absolute_path"]),
                          f"a hit of another member says where it is: {hit}")
            only = structured(await session.call_tool(
                "codebase_search", {"query": "backoff delay retry", "mode": "lexical", "member": ["lib"]}))["results"]
            check(only and all(hit["member"] == "lib" for hit in only), f"the filter keeps one member: {only}")
            wrong = await session.call_tool("codebase_search", {"query": "backoff", "member": ["nope"]})
            check(wrong.is_error and "no member `nope`" in wrong.content[0].text, f"an unknown member is said: {wrong}")
            graph = structured(await session.call_tool("call_graph", {"symbol": "Backoff"}))
            edges = [(e["from"]["member"], e["from"]["name"], e["to"]["member"], e["confidence"]) for e in graph["edges"]]
            check(edges == [("service", "retryRequest", "lib", "import")], f"a caller in another member: {graph}")
            callees = structured(await session.call_tool(
                "call_graph", {"symbol": "retryRequest", "direction": "callees", "member": "service"}))
            check([e["to"]["member"] for e in callees["edges"]] == ["lib"], f"a callee in another member: {callees}")


async def alone():
    params = StdioServerParameters(command=KEN, args=["--root", LONE, "serve", "--no-watch"], env=ENV)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            check("member" not in (await search_schema(session))["properties"], "no member filter outside a workspace")
            tools = (await session.list_tools()).tools
            graph_schema = next(t for t in tools if t.name == "call_graph").input_schema
            check("member" not in graph_schema["properties"], "no member argument to call_graph outside a workspace")
            hits = structured(await session.call_tool(
                "codebase_search", {"query": "backoff delay", "mode": "lexical"}))["results"]
            check(hits and all("member" not in hit for hit in hits), f"no member field outside a workspace: {hits}")
            passed = await session.call_tool("codebase_search", {"query": "backoff", "member": ["lib"]})
            check(passed.is_error and "member" in passed.content[0].text, f"the filter is unknown here: {passed}")


asyncio.run(in_workspace())
asyncio.run(alone())
print("all checks passed")
