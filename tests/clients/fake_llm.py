#!/usr/bin/env python3
"""A scripted stand-in for a model: an OpenAI-compatible chat-completions server.

    fake_llm.py LOG_JSONL QUERY [MODEL]

Listens on 127.0.0.1 on a free port and prints that port alone on its first
stdout line. Every request is appended to LOG_JSONL as one JSON object,
{"method", "path", "body", "reply", "text"}: the request, which branch below
answered it ("tool", "final", "plain"), and the text or tool name answered,
so a test can read what the client sent.

The script, by request (streaming SSE when the body asks for `stream`, plain
JSON otherwise):
  * the messages hold a `tool` message (a tool's result): a final text,
    "KEN-RESULT: " followed by the first 200 characters of that result;
  * else the request offers a tool whose name ends in `codebase_search`:
    a call to it with the arguments {"query": QUERY};
  * anything else (a title request, a request without tools): a short text.
GET /v1/models lists MODEL. Only the standard library is used.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_PATH = sys.argv[1]
QUERY = sys.argv[2]
MODEL = sys.argv[3] if len(sys.argv) > 3 else "fake-model"
MARKER = "KEN-RESULT: "
PLAIN = "A short answer from the fake model."
LOCK = threading.Lock()


def text_of(content):
    """A message's content as text (a string, or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or part.get("content") or ""))
            else:
                parts.append(str(part))
        return "".join(parts)
    return "" if content is None else json.dumps(content)


def tool_names(body):
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            names.append(str(fn.get("name", "")))
    return names


def decide(body):
    """("final", text) | ("tool", name) | ("plain", text)."""
    messages = body.get("messages") or []
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    if results:
        return "final", MARKER + text_of(results[-1].get("content"))[:200]
    for name in tool_names(body):
        if name.endswith("codebase_search"):
            return "tool", name
    return "plain", PLAIN


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: the JSONL log is the record
        pass

    def record(self, body, reply, text=None):
        entry = {"method": self.command, "path": self.path, "body": body, "reply": reply, "text": text}
        with LOCK, open(LOG_PATH, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

    def send_json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.record(None, "models" if self.path.rstrip("/").endswith("/models") else "404")
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.record(body, "404")
            self.send_json(404, {"error": {"message": "only chat completions here"}})
            return
        kind, value = decide(body)
        self.record(body, kind, value)
        model = body.get("model") or MODEL
        created = int(time.time())
        rid = "chatcmpl-fake-%d" % created
        if kind == "tool":
            call = {"id": "call_ken_1", "type": "function",
                    "function": {"name": value, "arguments": json.dumps({"query": QUERY})}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": value}
            finish = "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            self.send_json(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta, finish_reason=None, **extra):
            payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            payload.update(extra)
            self.wfile.write(("data: " + json.dumps(payload) + "\n\n").encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if kind == "tool":
            call = message["tool_calls"][0]
            chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]})
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]})
        else:
            chunk({"content": value})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [], "usage": usage}
            self.wfile.write(("data: " + json.dumps(payload) + "\n\n").encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
