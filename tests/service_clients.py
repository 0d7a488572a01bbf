"""Three MCP clients (the official Python SDK) at once on one repository,
each starting `ken serve` as agents do, while the repository is edited and
its branch switched. Every `ken serve` must attach to one shared service.

Usage: python3 service_clients.py KEN_BINARY REPO_ROOT
The environment (XDG_RUNTIME_DIR, KEN_SERVICE_IDLE_SECS...) is passed on to
`ken serve`. Prints one JSON line of findings; exits non-zero on a failed
expectation."""
import asyncio
import json
import os
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

KEN, ROOT = sys.argv[1], sys.argv[2]
CLIENTS = 3
NEW_CODE = "settle_overdue_invoices_quickly"
FEATURE_CODE = "reconcile_ledger_feature_branch"
# Every answer's text, checked for lock errors at the end.
ANSWERS = []


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def git(*args):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=ROOT, check=True,
                   capture_output=True)


def service_processes():
    """Pids of `ken serve --service` processes serving ROOT."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"--service" in args and ROOT.encode() in args:
            found.append(int(pid))
    return found


async def call(session, tool, args):
    result = await session.call_tool(tool, args)
    text = result.content[0].text if result.content else ""
    ANSWERS.append(text)
    check(not result.is_error, f"{tool} {args}: {text}")
    return result.structured_content or json.loads(text)


async def paths_for(session, query):
    out = await call(session, "codebase_search", {"query": query, "limit": 5, "mode": "lexical"})
    return [(r["path"], r.get("symbol")) for r in out["results"]]


async def wait_until(session, what, found, seconds=90):
    deadline = time.monotonic() + seconds
    while True:
        if await found(session):
            return
        check(time.monotonic() < deadline, f"a client never saw {what}")
        await asyncio.sleep(0.2)


class Stage:
    """An event per client, awaited together with the clients' tasks (a failed client fails the wait)."""

    def __init__(self):
        self.events = [asyncio.Event() for _ in range(CLIENTS)]

    async def all(self, tasks):
        waiting = asyncio.ensure_future(asyncio.gather(*(e.wait() for e in self.events)))
        while not waiting.done():
            for task in tasks:
                if task.done():
                    task.result()
            await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED, timeout=1)


async def client(n, stages, go, results):
    params = StdioServerParameters(command=KEN, args=["--root", ROOT, "serve"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            results[n] = {"first_status": await call(session, "index_status", {})}
            stages["attached"].events[n].set()
            await go["edited"].wait()

            async def sees_new_code(s):
                return any(symbol == NEW_CODE for _, symbol in await paths_for(s, NEW_CODE))

            await wait_until(session, "the edit", sees_new_code)
            stages["saw_edit"].events[n].set()
            await go["switched"].wait()

            async def sees_other_branch(s):
                feature = any(p == "feature_only.py" for p, _ in await paths_for(s, FEATURE_CODE))
                old = any(symbol == NEW_CODE for _, symbol in await paths_for(s, NEW_CODE))
                return feature and not old

            await wait_until(session, "the other branch", sees_other_branch)
            results[n]["last_status"] = await call(session, "index_status", {})
            # Every client still attached: the processes serving the repository now.
            results[n]["services"] = service_processes()
            stages["saw_switch"].events[n].set()
            await go["close"].wait()


async def main():
    stages = {name: Stage() for name in ["attached", "saw_edit", "saw_switch"]}
    go = {name: asyncio.Event() for name in ["edited", "switched", "close"]}
    results = {}
    tasks = [asyncio.create_task(client(n, stages, go, results)) for n in range(CLIENTS)]
    await stages["attached"].all(tasks)
    # An edit, committed, while all three are attached.
    with open(os.path.join(ROOT, "billing.py"), "a") as f:
        f.write(f"\n\ndef {NEW_CODE}(invoices):\n    return [i for i in invoices if i.overdue]\n")
    git("commit", "-qam", "settle")
    go["edited"].set()
    await stages["saw_edit"].all(tasks)
    git("checkout", "-q", "feature")
    go["switched"].set()
    await stages["saw_switch"].all(tasks)
    go["close"].set()
    await asyncio.gather(*tasks)
    locks = [a for a in ANSWERS if "lock" in a.lower()]
    print(json.dumps({"results": results, "lock_answers": locks, "answers": len(ANSWERS)}))


asyncio.run(main())
