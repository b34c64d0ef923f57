"""Profile grants. fulcrumd issues them only when its profiler asks (through the control
API of a later issue), so this test plays fulcrumd's side of the wire by hand, message
by message as docs/protocol.md describes, and checks what the client answers."""

import json
import os
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fulcrum_client import Client  # noqa: E402


class ProfileGrantTest(unittest.TestCase):
    def test_profile_grant_runs_callback_and_reports_time(self):
        d = tempfile.mkdtemp(prefix="fcp", dir="/tmp")
        path = os.path.join(d, "s.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        seen = []

        def peer():
            conn, _ = srv.accept()
            f = conn.makefile("rwb")

            def recv():
                return json.loads(f.readline())

            def send(m):
                f.write((json.dumps(m) + "\n").encode())
                f.flush()

            reg = recv()
            seen.append(reg)
            send({"type": "registered", "v": 1, "seq": reg["seq"], "worker_id": "train-1", "token": "t"})
            acq = recv()
            send({"type": "grant", "seq": acq["seq"], "grant": 1, "kind": "profile", "batch": 16, "deadline_ms": 500})
            seen.append(recv())  # the profile release
            acq = recv()  # the client asks again for its own turn
            send({"type": "grant", "seq": acq["seq"], "grant": 2, "kind": "train", "batch": 32, "deadline_ms": 500})
            seen.append(recv())
            conn.close()

        t = threading.Thread(target=peer)
        t.start()
        try:
            ran = []
            c = Client(path, role="train", workload="resnet18", batch=32, on_profile=ran.append)
            with c.train_step() as g:
                self.assertEqual((g.id, g.kind, g.batch), (2, "train", 32))
            c.close()
        finally:
            t.join(timeout=10)
            srv.close()
            os.unlink(path)
            os.rmdir(d)
        self.assertEqual(seen[0]["v"], 1)
        self.assertEqual(seen[0]["role"], "train")
        self.assertNotIn("profiles", seen[0])  # it runs profile batches: today's register
        self.assertEqual(ran, [16])
        self.assertEqual(seen[1]["type"], "release")
        self.assertEqual(seen[1]["grant"], 1)
        self.assertGreaterEqual(seen[1]["duration_ms"], 0)
        self.assertEqual(seen[2]["grant"], 2)


if __name__ == "__main__":
    unittest.main()
