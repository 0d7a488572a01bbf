"""Spawn-to-answer and memory: `ken serve` attached to a warm shared service vs in-process.
Usage: python3 svcbench.py KEN ROOT RUNS"""
import json, os, subprocess, sys, time, statistics

KEN, ROOT, RUNS = sys.argv[1], sys.argv[2], int(sys.argv[3])
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}}
INITED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def search(i):
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "codebase_search", "arguments": {"query": "open the database and read the settings", "limit": 5, "explain": True}}}


class Server:
    def __init__(self, extra):
        self.p = subprocess.Popen([KEN, "--root", ROOT, "serve", "--no-watch", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next = 2

    def send(self, m):
        self.p.stdin.write((json.dumps(m) + "\n").encode()); self.p.stdin.flush()

    def wait(self, i):
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == i:
                return m

    def ask(self):
        i = self.next; self.next += 1
        self.send(search(i))
        return self.wait(i)["result"]["structuredContent"]

    def close(self):
        self.p.stdin.close(); self.p.wait()


def used_model(out):
    return any("cosine" in (r.get("explain") or {}) for r in out["results"])


def run(extra):
    first, model = [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        s = Server(extra)
        s.send(INIT); s.wait(1); s.send(INITED)
        out = s.ask()
        first.append((time.perf_counter() - t) * 1000)
        while not used_model(out):
            time.sleep(0.02)
            out = s.ask()
        model.append((time.perf_counter() - t) * 1000)
        s.close()
        time.sleep(0.3)
    return statistics.median(first), statistics.median(model), min(model), max(model)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def service_pids():
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--service" in args and ROOT.encode() in args:
            out.append(int(pid))
    return out


def memory(extra):
    servers = [Server(extra) for _ in range(3)]
    for s in servers:
        s.send(INIT); s.wait(1); s.send(INITED)
        out = s.ask()
        while not used_model(out):
            time.sleep(0.05); out = s.ask()
    time.sleep(1)
    total = sum(rss_kb(s.p.pid) for s in servers) + sum(rss_kb(p) for p in service_pids())
    for s in servers:
        s.close()
    return total / 1024


# Warm the service once (its own start is not what is measured).
warm = Server([]); warm.send(INIT); warm.wait(1); warm.send(INITED)
o = warm.ask()
while not used_model(o):
    time.sleep(0.05); o = warm.ask()
print("in-process  p50 first answer %.0f ms, p50 first model answer %.0f ms (%.0f-%.0f)" % run(["--no-service"]))
print("warm service p50 first answer %.0f ms, p50 first model answer %.0f ms (%.0f-%.0f)" % run([]))
warm.close()
print("memory, 3 sessions: in-process %.0f MB; one service + 3 proxies %.0f MB" % (memory(["--no-service"]), memory([])))
