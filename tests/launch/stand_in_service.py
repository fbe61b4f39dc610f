"""A stand-in service for launcher tests: answers GET /health and GET / (its identity text)
on the given port; with --grandchild it also starts a sleeping child process and logs its pid,
to check that stopping the service's process group reaches grandchildren."""

from __future__ import annotations

import argparse
import http.server
import subprocess
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--identity", default="stand-in memory service")
    parser.add_argument("--grandchild", action="store_true")
    options = parser.parse_args()
    if options.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"grandchild {child.pid}", flush=True)
    identity = options.identity.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status": "healthy"}' if self.path == "/health" else identity
            self.send_response(200 if self.path in ("/", "/health") else 404)
            self.end_headers()
            self.wfile.write(body)

    http.server.ThreadingHTTPServer(("127.0.0.1", options.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
