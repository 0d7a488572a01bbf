"""Drives `ken serve` with the official MCP Python SDK over stdio.

Usage: python3 mcp_client.py KEN_BINARY REPO_ROOT
Exits non-zero (with a message) on the first failed expectation."""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

KEN, ROOT = sys.argv[1], sys.argv[2]

EXPECTED_TOOLS = {"codebase_search", "codebase_peek", "find_similar", "call_graph", "call_graph_path", "index_codebase", "index_status", "index_health_check"}
READ_ONLY = {"codebase_search", "codebase_peek", "find_similar", "call_graph", "call_graph_path", "index_status"}


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def structured(result):
    check(not result.is_error, f"tool error: {result.content}")
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def main():
    params = StdioServerParameters(command=KEN, args=["--root", ROOT, "serve"], env={"NO_COLOR": "1", "KEN_SHARED_CACHE": "0"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "ken", f"server name {init.server_info.name}")
            check(init.instructions and "codebase_search" in init.instructions, "instructions mention codebase_search")

            prompts = {p.name: p for p in (await session.list_prompts()).prompts}
            check({"search", "find", "call-graph", "index", "status"} <= set(prompts), f"prompts: {sorted(prompts)}")
            got = await session.get_prompt("search", {"query": "jwt expiry"})
            check("codebase_search" in got.messages[0].content.text and "jwt expiry" in got.messages[0].content.text, f"{got}")
            got = await session.get_prompt("status", {})
            check("index_status" in got.messages[0].content.text, f"{got}")

            tools = {t.name: t for t in (await session.list_tools()).tools}
            check(EXPECTED_TOOLS <= set(tools), f"tools: {sorted(tools)}")
            for name, tool in tools.items():
                check(tool.input_schema.get("type") == "object", f"{name} input schema: {tool.input_schema}")
                check(len(tool.description or "") > 40, f"{name} has a real description")
            for name in READ_ONLY:
                check(tools[name].annotations and tools[name].annotations.read_only_hint, f"{name} is read-only")

            # A good search: the definition first, with its code.
            out = structured(await session.call_tool("codebase_search", {"query": "render_template", "limit": 3}))
            top = out["results"][0]
            check(top["symbol"] == "render_template" and top["path"] == "src/lib.rs", f"top result {top}")
            check("fn render_template" in top["code"], "code is returned")

            # Peek: locations only.
            out = structured(await session.call_tool("codebase_peek", {"query": "check expiry of tokens"}))
            check(out["results"] and all("code" not in r for r in out["results"]), f"peek results {out}")

            # Filters and a token budget.
            out = structured(await session.call_tool("codebase_search", {"query": "config", "language": "rust", "token_budget": 60}))
            check(all(r["language"] == "rust" for r in out["results"]), "language filter")
            check(len(out["results"]) >= 1, "a budget still returns the best result")

            # Bad arguments: an error, never a dead server.
            bad_calls = [
                ("codebase_search", {}),
                ("codebase_search", {"query": 42}),
                ("codebase_search", {"query": "x", "limit": "ten"}),
                ("codebase_search", {"query": "x", "mode": "telepathic"}),
                ("codebase_search", {"query": "   "}),
                ("codebase_search", {"query": "x", "path": "src/["}),
                ("no_such_tool", {"query": "x"}),
            ]
            for name, args in bad_calls:
                try:
                    result = await session.call_tool(name, args)
                    check(result.is_error, f"{name} {args} should fail: {result}")
                except MCPError:
                    pass

            # The call graph: callers, callees, a path, and errors for bad arguments.
            out = structured(await session.call_tool("call_graph", {"symbol": "AppConfig", "direction": "callers"}))
            check([e["from"]["name"] for e in out["edges"]] == ["load"], f"call_graph callers: {out}")
            check(out["edges"][0]["kind"] == "constructor" and out["edges"][0]["call_site"]["path"] == "src/lib.rs", f"{out}")
            out = structured(await session.call_tool("call_graph", {"symbol": "AppConfig.load", "direction": "callees", "depth": 2}))
            check([e["to"]["name"] for e in out["edges"]] == ["AppConfig"], f"call_graph callees: {out}")
            out = structured(await session.call_tool("call_graph_path", {"from": "load", "to": "AppConfig"}))
            check(len(out["edges"]) == 1, f"call_graph_path: {out}")
            for args in ({"symbol": "no_such_symbol"}, {"symbol": "load", "direction": "sideways"}, {"symbol": " "}):
                result = await session.call_tool("call_graph", args)
                check(result.is_error, f"call_graph {args} should fail: {result}")

            # Paths never leave the root.
            out = structured(await session.call_tool("find_similar", {"target": "../../../etc/passwd:1", "limit": 5}))
            check(all(not r["path"].startswith("/") and ".." not in r["path"].split("/") for r in out["results"]), f"{out}")

            # 32 concurrent searches.
            queries = [f"config {i}" if i % 2 else "render_template" for i in range(32)]
            results = await asyncio.gather(*(session.call_tool("codebase_search", {"query": q, "limit": 3}) for q in queries))
            check(all(not r.is_error for r in results), "concurrent searches all succeed")

            status = structured(await session.call_tool("index_status", {}))
            check(status["files"] >= 5 and status["chunks"] > 0, f"status {status}")

            health = structured(await session.call_tool("index_health_check", {}))
            check(health["healthy"] is True and "findings" in health, f"health {health}")

            estimate = structured(await session.call_tool("index_codebase", {"estimate_only": True}))
            check(estimate["files"] >= 5, f"estimate {estimate}")
            report = structured(await session.call_tool("index_codebase", {}))
            check(report["files"] >= 5 and report["parsed"] == 0, f"re-index {report}")
            forced = structured(await session.call_tool("index_codebase", {"force": True}))
            check(forced["parsed"] == forced["files"], f"forced re-index parses everything: {forced}")
            out = structured(await session.call_tool("codebase_search", {"query": "render_template", "limit": 1}))
            check(out["results"][0]["symbol"] == "render_template", f"search after a forced re-index: {out}")
    print("mcp client: all checks passed")


asyncio.run(main())
