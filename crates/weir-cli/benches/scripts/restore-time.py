#!/usr/bin/env python3
"""Launch -> first record of a weir run (issue 25's restore time), on a pseudo-terminal so
weir prints its progress line (events and checkpoints every 0.5 s, stamped from launch).

    restore-time.py WEIR [--label L] -- run keyed-count ... --restore latest

Prints one JSON line: the label, seconds from launch to the first progress line with
events > 0 (weir's own stamp, 0.5 s resolution, and this script's clock), to the first
completed checkpoint, the whole run's wall and CPU seconds (user + sys of the child), the
load average at the start, and weir's `eager restore:` notice if it printed one.
"""
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

PROGRESS = re.compile(
    r"(?P<t>[\d.]+)s\s+\S+\s+events/s\s+(?P<ev>\S+)\s+events\s+checkpoints (?P<chk>\d+) \(last \d+ ms\)"
)


def human_to_float(s):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)


def main():
    args = sys.argv[1:]
    label = ""
    if "--label" in args:
        i = args.index("--label")
        label = args[i + 1]
        del args[i : i + 2]
    split = args.index("--")
    weir, cmd = args[0], args[split + 1 :]
    load = os.getloadavg()[0]
    master, slave = pty.openpty()
    t0 = time.monotonic()
    proc = subprocess.Popen([weir] + cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    first = {"record_weir_s": None, "record_s": None, "checkpoint_s": None}
    notice, text = None, ""
    while True:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            now = time.monotonic() - t0
            text = (text + chunk.decode(errors="replace"))[-8192:]
            for m in PROGRESS.finditer(text):
                if human_to_float(m["ev"]) > 0 and first["record_s"] is None:
                    first["record_weir_s"], first["record_s"] = float(m["t"]), round(now, 2)
                if int(m["chk"]) > 0 and first["checkpoint_s"] is None:
                    first["checkpoint_s"] = round(now, 2)
            m = re.search(r"eager restore: [^\r\n]*\)", text)
            if m:
                notice = m.group(0)
            text = re.split(r"[\r\n]", text)[-1]
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    out = {"label": label, "load1": load, **first, "wall_s": round(wall, 2),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "status": status, "notice": notice}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
