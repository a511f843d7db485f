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
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import progress  # noqa: E402  (the pty and progress-line reader shared with big-rows.py)


def main():
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return
    label = ""
    if "--label" in args:
        i = args.index("--label")
        label = args[i + 1]
        del args[i : i + 2]
    split = args.index("--")
    weir, cmd = args[0], args[split + 1 :]
    load = os.getloadavg()[0]
    proc, master, t0 = progress.spawn([weir] + cmd)
    first = {"record_weir_s": None, "record_s": None, "checkpoint_s": None}
    notice, lines = None, progress.Lines()
    while True:
        chunk = progress.read(master, 0.1)
        if chunk is None:
            continue
        if not chunk:
            break
        now = time.monotonic() - t0
        for weir_s, ev, chk in lines.feed(chunk):
            if ev > 0 and first["record_s"] is None:
                first["record_weir_s"], first["record_s"] = weir_s, round(now, 2)
            if chk > 0 and first["checkpoint_s"] is None:
                first["checkpoint_s"] = round(now, 2)
        m = re.search(r"eager restore: [^\r\n]*\)", lines.text)
        if m:
            notice = m.group(0)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    out = {"label": label, "load1": load, **first, "wall_s": round(wall, 2),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "status": status, "notice": notice}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
