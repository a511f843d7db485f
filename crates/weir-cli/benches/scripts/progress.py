"""weir's progress line, read from a pseudo-terminal: shared by the bench scripts.

weir prints its progress line (events and completed checkpoints every 0.5 s, stamped from
launch) only when stderr is a terminal, so the scripts that time a run (restore-time.py,
big-rows.py) start it on a pty and read the line back. This module is that part, once, so
the two scripts cannot come to disagree on what a progress line is. Import it from the
script's own folder (the scripts run as `python3 path/to/script.py`):

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import progress
"""
import os
import pty
import re
import select
import subprocess
import time

PROGRESS = re.compile(
    r"(?P<t>[\d.]+)s\s+\S+\s+events/s\s+(?P<ev>\S+)\s+events\s+checkpoints (?P<chk>\d+) \(last \d+ ms\)"
)


def human_to_float(s):
    """A count as weir prints it ("41.25M", "980k", "12") as a number."""
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)


def spawn(argv, **popen):
    """Start argv with stdout and stderr on a new pseudo-terminal (stdin /dev/null), so weir
    prints its progress line. Returns (proc, master, t0): read the output from the master
    fd; t0 is time.monotonic() just before the launch, the scripts' clock for "since launch".
    More keyword arguments go to subprocess.Popen (big-rows.py's preexec_fn)."""
    master, slave = pty.openpty()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, **popen
        )
    finally:
        os.close(slave)
    return proc, master, t0


def read(master, timeout):
    """The next chunk of the terminal's output: None if nothing came within timeout seconds,
    b"" at its end (the read fails with EIO once every holder of the other side closed it)."""
    r, _, _ = select.select([master], [], [], timeout)
    if not r:
        return None
    try:
        return os.read(master, 65536)
    except OSError:
        return b""


class Lines:
    """Progress lines out of the terminal's chunks, each reported once.

    weir redraws its line in place ("\\r") and a chunk may end mid-line, so the chunk's last
    segment is kept and read again with the next chunk, unless it already holds a whole
    progress line (which ends in "ms)"): that one is reported now, and not again.
    """

    def __init__(self):
        self.buf = b""
        # What the last feed searched (the kept segment and the chunk, segments joined by
        # "\n"), for a caller looking for other notices in the same output.
        self.text = ""

    def feed(self, chunk):
        """The progress lines in chunk (and the segment kept from before it), in order, as
        (weir's seconds since launch, events read, checkpoints completed)."""
        parts = re.split(rb"[\r\n]", self.buf + chunk)
        self.buf = parts[-1][-4096:]
        if PROGRESS.search(self.buf.decode(errors="replace")):
            self.buf = b""
        self.text = b"\n".join(parts).decode(errors="replace")
        return [
            (float(m["t"]), human_to_float(m["ev"]), int(m["chk"]))
            for m in PROGRESS.finditer(self.text)
        ]
