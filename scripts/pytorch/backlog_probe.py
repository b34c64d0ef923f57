# Listen backlog vs a stalled HTTP server: 64 clients connect while the server process
# is stopped for 3 s (docs/runtime.md). With backlog 5: 48 of 64 reset; with 128: none.
#   python3 scripts/pytorch/backlog_probe.py
import http.server, http.client, os, signal, sys, time, threading, multiprocessing
from concurrent.futures import ThreadPoolExecutor
def serve(q, port_q):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    class S(http.server.ThreadingHTTPServer):
        request_queue_size = q
    s = S(("127.0.0.1", 0), H); port_q.put(s.server_address[1]); s.serve_forever()
def post(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/", body=b"x"*3072); r = c.getresponse(); r.read(); c.close(); return r.status
    except OSError as e:
        return str(e)
for q in (5, 128):
    pq = multiprocessing.Queue()
    p = multiprocessing.Process(target=serve, args=(q, pq)); p.start(); port = pq.get()
    os.kill(p.pid, signal.SIGSTOP)
    with ThreadPoolExecutor(64) as pool:
        futs = [pool.submit(post, port) for _ in range(64)]
        time.sleep(3); os.kill(p.pid, signal.SIGCONT)
        res = [f.result() for f in futs]
    p.terminate()
    print("backlog", q, "ok", sum(r == 200 for r in res), "failed", [r for r in res if r != 200][:3], flush=True)
