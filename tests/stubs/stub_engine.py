"""A stand-in engine server for the bad-input tests, run as a process by the test engine `stub-test`.

python tests/stubs/stub_engine.py --port P --mode hang     never becomes healthy (prints, then waits)
python tests/stubs/stub_engine.py --port P --mode die-after-N
                                                   serves N completions (tests/stubs/stub_server.py's
                                                   streams), then exits with code 3 in the middle
                                                   of the next stream
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from http.server import ThreadingHTTPServer

# Run as a script: its own folder (tests/stubs) is the first entry of sys.path, so its sibling imports by name.
from stub_server import Handler, _chunk


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True)
    a = ap.parse_args()
    if a.mode == "hang":
        print("stub: loading weights (this stub never gets there)", flush=True)
        time.sleep(3600)
        return
    limit = int(a.mode.removeprefix("die-after-"))
    lock = threading.Lock()
    served = [0]

    class Dying(Handler):
        def do_POST(self):
            with lock:
                served[0] += 1
                n = served[0]
            if n <= limit:
                return super().do_POST()
            self.rfile.read(int(self.headers["content-length"]))
            self._start()
            self.wfile.write(_chunk(" t0"))
            self.wfile.flush()
            print(f"stub: exiting after {limit} completions, in the middle of request {n}", flush=True)
            os._exit(3)

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Dying)
    print(f"stub: serving on {a.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
