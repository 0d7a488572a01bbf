"""Drives `ken serve` with the official MCP Python SDK over stdio.

Usage: python3 mcp_client.py KEN_BINARY REPO_ROOT
Exits non-zero (with a message) on the first failed expectation."""
import asyncio
import json
import os
import sys
import tempfile

import jsonschema

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

KEN, ROOT = sys.argv[1], sys.argv[2]

EXPECTED_TOOLS = {
    "codebase_search", "codebase_context", "codebase_peek", "find_similar", "call_graph", "call_graph_path", "symbol_context", "change_impact", "repo_map",
    "index_codebase", "index_status", "index_health_check", "index_metrics", "index_logs", "add_knowledge_base",
    "list_knowledge_bases", "remove_knowledge_base",
}
READ_ONLY = {
    "codebase_search", "codebase_context", "codebase_peek", "find_similar", "call_graph", "call_graph_path", "symbol_context", "change_impact", "repo_map",
    "index_status", "index_metrics", "index_logs", "list_knowledge_bases",
}
DATA_TOOLS = EXPECTED_TOOLS


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


async def expect_error(session, name, args, needle=""):
    """A tool error or a JSON-RPC error (e.g. -32602) mentioning `needle`."""
    try:
        result = await session.call_tool(name, args)
    except MCPError as e:
        check(needle.lower() in str(e).lower(), f"{name} {args}: {e}")
        return str(e)
    check(result.is_error, f"{name} {args} should fail: {result}")
    text = result.content[0].text
    check(needle.lower() in text.lower(), f"{name} {args}: {text}")
    return text


def structured(result):
    check(not result.is_error, f"tool error: {result.content}")
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


# The folders this client declares as its roots (MCP roots/list); the test adds some.
ROOTS = [os.path.realpath(ROOT)]


async def list_roots(context):
    return types.ListRootsResult(roots=[types.Root(uri=f"file://{r}") for r in ROOTS])


def check_lean(schema, where):
    """Standard JSON Schema only: no schemars formats, no $schema, no null defaults."""
    if isinstance(schema, dict):
        check(schema.get("format") in (None, "date-time", "uri", "email", "uuid"), f"{where}: format {schema.get('format')}")
        check("$schema" not in schema, f"{where}: $schema")
        check(not ("default" in schema and schema["default"] is None), f"{where}: default null")
        for key, value in schema.items():
            check_lean(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            check_lean(value, f"{where}[{i}]")


async def main():
    params = StdioServerParameters(command=KEN, args=["--root", ROOT, "serve", "--tools", "all"], env={"NO_COLOR": "1", "KEN_SHARED_CACHE": "0", "KEN_CONFIG": os.path.join(ROOT, "no-settings.toml")})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, list_roots_callback=list_roots) as session:
            init = await session.initialize()
            check(init.server_info.name == "ken", f"server name {init.server_info.name}")
            check(init.instructions and "codebase_search" in init.instructions, "instructions mention codebase_search")
            check("prefix" in init.instructions, "instructions say how tool names read under a client's prefix")
            check(init.capabilities.prompts is not None and init.capabilities.tools is not None, f"capabilities {init.capabilities}")

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
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)
                check_lean(tool.input_schema, f"{name} input")
                check_lean(tool.output_schema, f"{name} output")
                for prop, spec in tool.input_schema.get("properties", {}).items():
                    check(not isinstance(spec.get("type"), list) and "anyOf" not in spec, f"{name}.{prop}: a plain type {spec}")
                check(len(tool.description or "") > 40, f"{name} has a real description")
            for name in DATA_TOOLS:
                schema = tools[name].output_schema
                check(schema and schema.get("type") == "object", f"{name} declares an output schema")
                jsonschema.Draft202012Validator.check_schema(schema)
            for name in READ_ONLY:
                check(tools[name].annotations and tools[name].annotations.read_only_hint, f"{name} is read-only")

            # A good search: the definition first, with its code.
            out = structured(await session.call_tool("codebase_search", {"query": "render_template", "limit": 3}))
            index = out["index"]
            check(index["indexed_at"] and index["pending_changes"] is not None and "branch" in index, f"freshness {index}")
            top = out["results"][0]
            check(top["symbol"] == "render_template" and top["path"] == "src/lib.rs", f"top result {top}")
            check("fn render_template" in top["code"], "code is returned")
            check(all("explain" not in r for r in out["results"]), "no explanation unless asked")

            # Explain: each side's score and the factors that make the result's score.
            out = structured(await session.call_tool("codebase_search", {"query": "render_template", "limit": 3, "explain": True}))
            top = out["results"][0]
            factors = [f["reason"] for f in top["explain"]["factors"]]
            check("defines the identifier" in factors, f"explained factors {top['explain']}")
            product = top["explain"]["fused"]
            for f in top["explain"]["factors"]:
                product *= f["factor"]
            check(abs(product - top["score"]) < 1e-5, f"score = fused x factors: {top}")

            # Context for a question: the code and what surrounds it, within the whole budget.
            out = structured(await session.call_tool("codebase_context", {"query": "render_template", "budget": 1000, "mode": "lexical"}))
            check(out["budget"] == 1000 and 0 < out["tokens"] <= 1000, f"context tokens {out['tokens']}")
            text = json.dumps(out, separators=(",", ":"), ensure_ascii=False)
            check(len(text) < 1000 * 8, f"context answer too long for its budget: {len(text)} characters")
            pieces = out["pack"]["pieces"]
            check(pieces[0]["role"] == "match" and "fn render_template" in pieces[0]["text"], f"context pieces {pieces}")
            check(all({"path", "lines", "role", "text"} <= set(p) for p in pieces), f"context piece fields {pieces}")

            # Peek: locations only.
            out = structured(await session.call_tool("codebase_peek", {"query": "check expiry of tokens"}))
            check(out["results"] and all("code" not in r for r in out["results"]), f"peek results {out}")

            # Filters and a token budget.
            out = structured(await session.call_tool("codebase_search", {"query": "config", "language": "rust", "token_budget": 60}))
            check(all(r["language"] == "rust" for r in out["results"]), "language filter")
            check(len(out["results"]) >= 1, "a budget still returns the best result")

            # One result per file: the files, not every chunk of the best one.
            everything = structured(await session.call_tool("codebase_peek", {"query": "config", "mode": "lexical", "limit": 20}))
            per_file = structured(await session.call_tool("codebase_peek", {"query": "config", "mode": "lexical", "limit": 20, "max_per_file": 1}))
            all_paths = [r["path"] for r in everything["results"]]
            paths = [r["path"] for r in per_file["results"]]
            check(len(all_paths) > len(set(all_paths)), f"some file has several config chunks: {all_paths}")
            check(paths == list(dict.fromkeys(all_paths)), f"max_per_file 1 keeps each file's best: {paths} of {all_paths}")

            # Identical code in two files: one result that lists the other place.
            out = structured(await session.call_tool("codebase_search", {"query": "jittered_backoff_delays", "limit": 5}))
            named = [r for r in out["results"] if r["symbol"] == "jittered_backoff_delays"]
            check(len(named) == 1, f"one result for two identical copies: {out['results']}")
            places = {named[0]["path"]} | {c["path"] for c in named[0].get("copies", [])}
            check(places == {"src/retry.py", "tools/retry_copy.py"}, f"the copy is listed: {named[0]}")
            check(all(c["start_line"] == 1 and c["end_line"] >= 4 for c in named[0]["copies"]), f"{named[0]}")

            # Bad arguments: an error naming the argument, never a dead server.
            bad_calls = [
                ("codebase_search", {}, "query"),
                ("codebase_search", {"query": 42}, "string"),
                ("codebase_search", {"query": "x", "limit": "ten"}, "limit"),
                ("codebase_search", {"query": "x", "mode": "telepathic"}, "telepathic"),
                ("codebase_search", {"query": "   "}, "query"),
                ("codebase_search", {"query": "x", "path": "src/["}, "src/["),
                ("codebase_peek", {"query": "x", "max_per_file": 0}, "max_per_file"),
                ("find_similar", {}, "target"),
                ("codebase_context", {"query": "x", "budget": 100}, "budget"),
                ("codebase_context", {"query": "  "}, "query"),
                ("index_codebase", {"force": "yes"}, "force"),
                ("index_health_check", {"repair": 3}, "repair"),
                ("add_knowledge_base", {}, "path"),
                ("remove_knowledge_base", {"name": 7}, ""),
                ("no_such_tool", {"query": "x"}, "no_such_tool"),
                ("codebase_search", {"query": "x", "max_results": 3}, "max_results"),
                ("codebase_search", {"query": "x", "limit": 0}, "limit"),
                ("find_similar", {"target": "x", "limit": 0}, "limit"),
            ]
            for name, args, needle in bad_calls:
                await expect_error(session, name, args, needle)

            # The call graph: callers, callees, a path, and errors for bad arguments.
            out = structured(await session.call_tool("call_graph", {"symbol": "AppConfig", "direction": "callers"}))
            check([e["from"]["name"] for e in out["edges"]] == ["load"], f"call_graph callers: {out}")
            check(out["edges"][0]["kind"] == "constructor" and out["edges"][0]["call_site"]["path"] == "src/lib.rs", f"{out}")
            out = structured(await session.call_tool("call_graph", {"symbol": "AppConfig.load", "direction": "callees", "depth": 2}))
            check([e["to"]["name"] for e in out["edges"]] == ["AppConfig"], f"call_graph callees: {out}")
            out = structured(await session.call_tool("call_graph_path", {"from": "load", "to": "AppConfig"}))
            check(len(out["edges"]) == 1, f"call_graph_path: {out}")
            for args, needle in (({"symbol": "no_such_symbol"}, ""), ({"symbol": "load", "direction": "sideways"}, "direction"), ({"symbol": " "}, "symbol")):
                await expect_error(session, "call_graph", args, needle)

            # Where to start: a map within its budget, listing the definitions.
            out = structured(await session.call_tool("repo_map", {"budget": 500}))
            listed = "\n".join(p["text"] for p in out["map"]["pieces"])
            check("pub struct AppConfig" in listed and out["files"] >= 3, f"repo_map: {out}")
            check(out["map"]["tokens"] <= 500, f"repo_map budget: {out}")
            await expect_error(session, "repo_map", {"budget": 100}, "budget")
            # Context for an edit: the body, a known caller with its call site, within the budget.
            out = structured(await session.call_tool("symbol_context", {"symbol": "AppConfig", "budget": 500}))
            check(out["symbol"]["path"] == "src/lib.rs" and out["symbol"]["kind"] == "struct", f"symbol_context: {out}")
            check(any(c.endswith(" AppConfig.load (constructor)") for c in out["callers"]), f"symbol_context callers: {out}")
            roles = [p["role"] for p in out["pack"]["pieces"]]
            check(roles and roles[0] == "body", f"symbol_context pieces: {roles}")
            check(len(json.dumps(out, separators=(",", ":"))) < 500 * 4, f"symbol_context stays small: {out}")
            out = structured(await session.call_tool("symbol_context", {"symbol": "load", "locations_only": True}))
            check(out["locations"] == ["src/lib.rs:10 method AppConfig.load"], f"symbol_context locations: {out}")
            for args, needle in (({"symbol": "AppConfg"}, "close names: AppConfig"), ({"symbol": "load", "budget": 100}, "budget"), ({"symbol": " "}, "symbol")):
                await expect_error(session, "symbol_context", args, needle)
            # What the uncommitted change affects: `scale`, reached by tests/test_scale.py::test_scale.
            out = structured(await session.call_tool("change_impact", {}))
            jsonschema.validate(out, tools["change_impact"].output_schema)
            check([f["path"] for f in out["files"]] == ["src/scale.py"], f"change_impact files: {out}")
            check([(s["change"], s["name"]) for s in out["symbols"]] == [("modified", "scale")], f"change_impact symbols: {out}")
            check([c["symbol"] for c in out["callers"]] == ["tests/test_scale.py:test_scale"], f"change_impact callers: {out}")
            check([t["name"] for t in out["tests"]] == ["test_scale"], f"change_impact tests: {out}")
            check(out["command"] == "pytest tests/test_scale.py::test_scale", f"change_impact command: {out}")
            check(out["risk"]["level"] in ("low", "medium", "high") and out["risk"]["reasons"], f"change_impact risk: {out}")
            await expect_error(session, "change_impact", {"staged": True}, "no changes between")
            await expect_error(session, "change_impact", {"rev": "no-such-rev"}, "unknown revision `no-such-rev`")

            # Paths never leave the root.
            for target in ["../../../etc/passwd:1", "/etc/passwd:1", "src/../../x.rs:3"]:
                result = await session.call_tool("find_similar", {"target": target, "limit": 5})
                check(result.is_error and "inside" in result.content[0].text, f"find_similar {target}: {result}")
            out = structured(await session.call_tool("find_similar", {"target": "src/lib.rs:2", "limit": 5}))
            check(all(not r["path"].startswith("/") and ".." not in r["path"].split("/") for r in out["results"]), f"{out}")
            out = structured(await session.call_tool("codebase_search", {"query": "config", "path": "../**"}))
            check(out["results"] == [], f"a path glob cannot reach outside the root: {out}")

            # 32 concurrent searches.
            queries = [f"config {i}" if i % 2 else "render_template" for i in range(32)]
            results = await asyncio.gather(*(session.call_tool("codebase_search", {"query": q, "limit": 3}) for q in queries))
            check(all(not r.is_error for r in results), "concurrent searches all succeed")

            status = structured(await session.call_tool("index_status", {}))
            check(status["files"] >= 5 and status["chunks"] > 0, f"status {status}")
            check(status["index_run_in_progress"] is False and status["knowledge_bases"] == [], f"status {status}")

            metrics = structured(await session.call_tool("index_metrics", {}))
            check(metrics["queries"]["count"] >= 34, f"every search is counted: {metrics['queries']}")
            search = metrics["tools"]["codebase_search"]
            check(search["errors"] >= 2 and search["latency"]["p95_ms"] >= search["latency"]["p50_ms"] > 0, f"{search}")
            check(sum(b["count"] for b in search["latency"]["histogram"]) == search["latency"]["count"], f"{search}")

            logs = structured(await session.call_tool("index_logs", {"limit": 500}))
            check(any("codebase_search: answered" in r["message"] for r in logs["records"]), f"logs {logs['records'][-5:]}")
            check(logs["log_file"].endswith("ken.log") and os.path.exists(logs["log_file"]), f"{logs['log_file']}")
            warnings = structured(await session.call_tool("index_logs", {"level": "warn", "category": "mcp"}))
            check(warnings["records"] and all(r["level"] in ("warn", "error") and r["category"] == "mcp" for r in warnings["records"]), f"{warnings}")
            await expect_error(session, "index_logs", {"level": "loud"}, "level")
            await expect_error(session, "index_logs", {"limit": -1}, "limit")

            health = structured(await session.call_tool("index_health_check", {}))
            check(health["healthy"] is True and "findings" in health, f"health {health}")

            estimate = structured(await session.call_tool("index_codebase", {"estimate_only": True}))
            check(estimate["files"] >= 5, f"estimate {estimate}")
            report = structured(await session.call_tool("index_codebase", {}))
            check(report["files"] >= 5 and report["parsed"] == 0, f"re-index {report}")
            progress = []

            async def on_progress(value, total, message):
                progress.append((value, total, message))

            forced = structured(await session.call_tool("index_codebase", {"force": True, "wait_for_embeddings": True}, progress_callback=on_progress))
            check(forced["parsed"] == forced["files"], f"forced re-index parses everything: {forced}")
            check(forced["embedding"]["contents"] > 0 and forced["embedding_status"] == "up to date", f"{forced}")
            values = [v for v, _, _ in progress]
            check(len(values) >= 2 and values == sorted(set(values)), f"progress increases: {progress}")
            check(any("indexing" in (m or "") for _, _, m in progress) and any("embedding" in (m or "") for _, _, m in progress), f"{progress}")
            out = structured(await session.call_tool("codebase_search", {"query": "check whether a token has expired", "mode": "semantic", "limit": 3}))
            check(out["results"] and "notice" not in out, f"semantic search after the forced re-index: {out}")

            # Knowledge bases: refused locations, then a docs folder searched with the project.
            for path in ["/", "/etc", os.path.expanduser("~"), os.path.expanduser("~/.ssh"), os.path.expanduser("~/.aws"), "/no/such/folder"]:
                result = await session.call_tool("add_knowledge_base", {"path": path})
                check(result.is_error, f"add_knowledge_base {path} must be refused: {result}")
            # A client cannot widen what ken reads: a folder outside its roots, or one
            # reached through a symlink inside the project, is refused and never searched.
            with tempfile.TemporaryDirectory() as outside:
                with open(os.path.join(outside, "secret.txt"), "w") as f:
                    f.write("the vault passphrase is quokka-lighthouse-4471\n")
                result = await session.call_tool("add_knowledge_base", {"path": outside, "name": "outside"})
                check(result.is_error and "roots" in result.content[0].text and "--allow-kb" in result.content[0].text, f"outside the roots: {result}")
                link = os.path.join(ROOT, "linked_outside")
                os.symlink(outside, link)
                try:
                    ROOTS.append(os.path.realpath(outside))
                    result = await session.call_tool("add_knowledge_base", {"path": "linked_outside", "name": "linked"})
                    check(result.is_error and "symbolic link" in result.content[0].text, f"through a symlink: {result}")
                    ROOTS.pop()
                finally:
                    os.remove(link)
                listed = structured(await session.call_tool("list_knowledge_bases", {}))
                check(listed["knowledge_bases"] == [], f"nothing was added: {listed}")
                for tool in ("codebase_search", "codebase_peek"):
                    out = structured(await session.call_tool(tool, {"query": "vault passphrase quokka lighthouse", "mode": "lexical"}))
                    check(all(r["base"] == "project" and "quokka" not in r.get("code", "") for r in out["results"]), f"{tool}: {out}")
            with tempfile.TemporaryDirectory() as docs:
                ROOTS.append(os.path.realpath(docs))
                with open(os.path.join(docs, "guide.md"), "w") as f:
                    f.write("# Deployment guide\n\nRotate the signing keys of the frobnicator every quarter.\n")
                added = structured(await session.call_tool("add_knowledge_base", {"path": docs, "name": "docs"}))
                check(added["added"]["name"] == "docs" and added["index"]["files"] == 1, f"{added}")
                again = await session.call_tool("add_knowledge_base", {"path": docs, "name": "docs"})
                check(again.is_error and "exists" in again.content[0].text, f"{again}")
                listed = structured(await session.call_tool("list_knowledge_bases", {}))
                check([b["name"] for b in listed["knowledge_bases"]] == ["docs"] and listed["knowledge_bases"][0]["files"] == 1, f"{listed}")
                out = structured(await session.call_tool("codebase_search", {"query": "frobnicator signing keys", "mode": "lexical"}))
                top = out["results"][0]
                check(top["base"] == "docs" and top["path"] == "guide.md" and top["absolute_path"].startswith(os.path.realpath(docs)), f"{top}")
                out = structured(await session.call_tool("codebase_search", {"query": "frobnicator", "base": "project", "mode": "lexical"}))
                check(all(r["base"] == "project" for r in out["results"]), f"base filter {out}")
                result = await session.call_tool("codebase_search", {"query": "x", "base": "nope"})
                check(result.is_error, f"unknown base {result}")
                status = structured(await session.call_tool("index_status", {}))
                check(status["knowledge_bases"][0]["name"] == "docs", f"{status}")
                removed = structured(await session.call_tool("remove_knowledge_base", {"name": "docs"}))
                check(removed["removed"]["name"] == "docs" and os.path.exists(os.path.join(docs, "guide.md")), f"{removed}")
                result = await session.call_tool("remove_knowledge_base", {"name": "docs"})
                check(result.is_error, f"removing twice {result}")
                out = structured(await session.call_tool("codebase_search", {"query": "frobnicator signing keys", "mode": "lexical"}))
                check(all(r["base"] == "project" for r in out["results"]), f"removed base not searched {out}")
            out = structured(await session.call_tool("codebase_search", {"query": "render_template", "limit": 1}))
            check(out["results"][0]["symbol"] == "render_template", f"search after a forced re-index: {out}")
    print("mcp client: all checks passed")


asyncio.run(main())
