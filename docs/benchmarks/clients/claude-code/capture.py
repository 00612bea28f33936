# A recording server for what a client sends: every request is written to /tmp/ccap/reqNN.json and
# answered 400 (HEAD and GET: 200). Run it, then point the client at http://127.0.0.1:8899.
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
n = 0
class H(BaseHTTPRequestHandler):
    def _log(self, body=b""):
        global n
        n += 1
        with open(f"/tmp/ccap/req{n:02d}.json", "w") as f:
            json.dump({"method": self.command, "path": self.path, "headers": dict(self.headers),
                       "body": body.decode("utf-8", "replace")}, f)
    def do_HEAD(self):
        self._log(); self.send_response(200); self.end_headers()
    def do_GET(self):
        self._log(); self.send_response(200); self.send_header("content-type","application/json"); self.end_headers(); self.wfile.write(b"{}")
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self._log(body)
        out = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": "capture only"}}).encode()
        self.send_response(400); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(out))); self.end_headers(); self.wfile.write(out)
HTTPServer(("127.0.0.1", 8899), H).serve_forever()
