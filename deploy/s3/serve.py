"""The S3-compatible store of deploy/compose.yaml: moto's S3 server on 0.0.0.0:$PORT
(default 5000), with the buckets named in $BUCKETS (comma-separated) made at start, so
the cluster's `--checkpoint-dir s3://BUCKET/...` exists before the coordinator starts.
`serve.py check` is the container's health check: it succeeds once every bucket answers.

moto keeps everything in memory: a restarted store is empty. It is for trying Weir on one
machine and for tests; a real deployment points AWS_ENDPOINT_URL (or nothing, for AWS) at
real object storage.
"""

import os
import signal
import sys
import threading
import urllib.error
import urllib.request

from moto.server import ThreadedMotoServer


def check(port: int) -> None:
    """The health check (`serve.py check`): exits 0 once every bucket answers."""
    for bucket in filter(None, os.environ.get("BUCKETS", "").split(",")):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/{bucket.strip()}").close()
        except OSError as e:
            sys.exit(f"bucket {bucket} not ready: {e}")


def main() -> None:
    port = int(os.environ.get("PORT", "5000"))
    if sys.argv[1:] == ["check"]:
        check(port)
        return
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=port, verbose=False)
    server.start()
    for bucket in filter(None, os.environ.get("BUCKETS", "").split(",")):
        # moto takes an unsigned request.
        request = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket.strip()}", method="PUT")
        try:
            urllib.request.urlopen(request).close()
        except urllib.error.HTTPError as e:
            sys.exit(f"cannot make bucket {bucket!r} ($BUCKETS): {e} {e.read().decode(errors='replace')}")
        print(f"bucket {bucket} made", flush=True)
    print(f"moto S3 listening on 0.0.0.0:{port}", flush=True)
    done = threading.Event()
    # As PID 1 no signal has a default action: stop on SIGTERM (docker stop) and SIGINT.
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
