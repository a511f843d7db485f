#!/usr/bin/env python3
"""Issue 25's large-state rows: W1 (keyed-count) on the disk backend under a cgroup v1
memory limit, measured once (BENCHMARKS.md, "W1 with 100 M keys under 2 GiB").

One run of `weir run keyed-count … --state-backend disk` in a fresh memory cgroup (default
2 GiB), under `/usr/bin/time -v`, on a pseudo-terminal so weir prints its progress line
(events and completed checkpoints every 0.5 s), each chunk of it time-stamped here from the
launch. While it runs, every 2 s: the cgroup's usage and anonymous memory (memory.stat rss),
the bytes of the state folder and of the checkpoint folder, and `weir checkpoints list` (so
the retained checkpoints' durations and new bytes are seen before retention drops them).

With --kill-at-checkpoint N the process is SIGKILLed once the job's checkpoint N has
completed (or, with --kill-at-events E, at the first checkpoint completed once E events
were read, as the progress line shows it), and started again with `--restore latest` in a fresh cgroup: the report gives
launch → first record and launch → first completed checkpoint of the resumed run (from the
progress line: 0.5 s resolution), and its end (with --verify: exact or not).

Stopping the script closes weir's terminal, and weir dies at its next progress line
(SIGABRT: the write to stderr fails), as abruptly as a kill; --resume-only then resumes it
from OUT's checkpoints, with --events as far as there is time for.

Run as root (the cgroup), through the gate on the shared machine:
  /work/notes/gate python3 crates/weir-cli/benches/scripts/big-rows.py \
      --bin target/release/weir --out /work/big-runs/p2-100m --keys 100000000 \
      --events 200000000 --parallelism 2 [--kill-at-checkpoint 30] [-- --verify …]
Writes OUT/run-*.log (weir's output), OUT/run-*.time (time -v), OUT/samples-*.jsonl and
OUT/report.json, and prints the report.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import progress  # noqa: E402  (the pty and progress-line reader shared with restore-time.py)

CGROUP_ROOT = "/sys/fs/cgroup/memory"


class Cgroup:
    def __init__(self, name, limit):
        self.dir = os.path.join(CGROUP_ROOT, name)
        if os.path.isdir(self.dir):
            os.rmdir(self.dir)
        os.mkdir(self.dir)
        self.write("memory.limit_in_bytes", limit)
        if os.path.exists(os.path.join(self.dir, "memory.memsw.limit_in_bytes")):
            self.write("memory.memsw.limit_in_bytes", limit)

    def write(self, f, v):
        with open(os.path.join(self.dir, f), "w") as fh:
            fh.write(str(v))

    def read(self, f):
        with open(os.path.join(self.dir, f)) as fh:
            return fh.read()

    def field(self, f, name):
        for line in self.read(f).splitlines():
            k, _, v = line.partition(" ")
            if k == name:
                return int(v)
        return None

    def stats(self):
        return {
            "max_usage_bytes": int(self.read("memory.max_usage_in_bytes")),
            "failcnt": int(self.read("memory.failcnt")),
            "oom_kill": self.field("memory.oom_control", "oom_kill"),
            "under_oom": self.field("memory.oom_control", "under_oom"),
        }

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def checkpoints(bin_, chk_dir):
    try:
        out = subprocess.run(
            [bin_, "checkpoints", "list", chk_dir, "--format", "json"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except subprocess.TimeoutExpired:
        return []
    try:
        rows = json.loads(out)  # one document: a list of checkpoints
    except json.JSONDecodeError:
        return []
    rows = rows if isinstance(rows, list) else [rows]
    return [r for r in rows if isinstance(r, dict) and r.get("status") == "complete"]


def weir_child(pid):
    """The pid of weir under /usr/bin/time (its only child)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = fh.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def run_once(a, tag, restore):
    cg = Cgroup(f"weir-big-{os.getpid()}-{tag}", a.limit)  # one per script: rows may run side by side
    log_path = os.path.join(a.out, f"run-{tag}.log")
    time_path = os.path.join(a.out, f"run-{tag}.time")
    cmd = [
        a.bin, "run", "keyed-count", "--events", str(a.events), "--keys", str(a.keys),
        "--parallelism", str(a.parallelism), "--checkpoint-interval", a.interval,
        "--state-backend", "disk", "--incremental-checkpoints", "--discard-output",
        "--checkpoint-dir", a.chk, "--state-dir", a.state,
    ] + (["--restore", "latest"] if restore else []) + a.extra

    def enter_cgroup():
        with open(os.path.join(cg.dir, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))

    proc, master, t0 = progress.spawn(
        ["/usr/bin/time", "-v", "-o", time_path] + cmd, preexec_fn=enter_cgroup
    )
    events = []  # (seconds since launch, events, checkpoints completed)
    first_record = first_checkpoint = None
    killed = None
    samples_path = os.path.join(a.out, f"samples-{tag}.jsonl")
    seen = {}
    stop = threading.Event()
    peak = {"state_bytes": 0, "chk_bytes": 0, "rss_bytes": 0, "usage_bytes": 0}

    def sampler():
        with open(samples_path, "w") as fh:
            while not stop.is_set():
                s = {
                    "t": round(time.monotonic() - t0, 2),
                    "usage_bytes": int(cg.read("memory.usage_in_bytes")),
                    "rss_bytes": cg.field("memory.stat", "rss"),
                    "cache_bytes": cg.field("memory.stat", "cache"),
                    "state_bytes": du(a.state),
                    "chk_bytes": du(a.chk),
                }
                for k in peak:
                    peak[k] = max(peak[k], s[k] or 0)
                for c in checkpoints(a.bin, a.chk):
                    seen.setdefault(c["id"], c)
                fh.write(json.dumps(s) + "\n")
                fh.flush()
                stop.wait(2.0)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    lines = progress.Lines()
    with open(log_path, "wb") as log:
        while True:
            chunk = progress.read(master, 0.2)
            if chunk is not None:
                if not chunk:
                    break
                now = time.monotonic() - t0
                log.write(chunk)
                for _, ev, chk in lines.feed(chunk):
                    events.append((round(now, 2), ev, chk))
                    if ev > 0 and first_record is None:
                        first_record = now
                    if chk > 0 and first_checkpoint is None:
                        first_checkpoint = now
            elif proc.poll() is not None:
                break
            due = (a.kill_at_checkpoint and seen and max(seen) >= a.kill_at_checkpoint) or (
                a.kill_at_events and len(events) > 1 and events[-2][1] >= a.kill_at_events
                and events[-1][2] > events[-2][2])
            if due and not restore and killed is None:
                pid = weir_child(proc.pid)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed = {"at_s": round(time.monotonic() - t0, 2),
                              "events": events[-1][1] if events else None,
                              "latest_checkpoint": max(seen) if seen else None}
    rc = proc.wait()
    wall = time.monotonic() - t0
    stop.set()
    th.join()
    os.close(master)
    with open(time_path) as fh:
        tv = fh.read()

    def tfield(name):
        m = re.search(re.escape(name) + r":\s*([\d.:]+)", tv)
        return m.group(1) if m else None

    user, sys_ = float(tfield("User time (seconds)")), float(tfield("System time (seconds)"))
    with open(log_path, "rb") as fh:
        text = fh.read().decode(errors="replace")
    summary = [l.strip() for l in re.split(r"[\r\n]+", text)
               if re.match(r"\s*(keyed-count|checkpoints:|restarts:|verify|weir:|error|  from)", l)
               or "verif" in l.lower() or "exact" in l.lower()]
    cps = sorted(seen.values(), key=lambda c: c["id"])
    res = {
        "tag": tag, "command": " ".join(cmd), "exit": rc, "wall_s": round(wall, 2),
        "cpu_user_s": user, "cpu_sys_s": sys_,
        "peak_rss_kb_time": int(tfield("Maximum resident set size (kbytes)")),
        "cgroup": cg.stats(), "peak_samples": peak,
        "first_record_s": first_record and round(first_record, 2),
        "first_checkpoint_s": first_checkpoint and round(first_checkpoint, 2),
        "killed": killed, "summary_lines": summary[-12:],
        "checkpoints_seen": len(cps),
        "load_at_end": open("/proc/loadavg").read().split()[:3],
    }
    if cps:
        d = [c["duration_ms"] for c in cps]
        nb = [c["new_bytes"] for c in cps]
        res["checkpoint_duration_ms"] = {
            "median": statistics.median(d), "max": max(d),
            "p90": sorted(d)[int(len(d) * 0.9)]}
        res["checkpoint_new_bytes"] = {"median": statistics.median(nb), "max": max(nb)}
        res["checkpoint_total_bytes_last"] = cps[-1]["bytes"]
        res["source_records_last_checkpoint"] = cps[-1].get("source_records")
    with open(os.path.join(a.out, f"checkpoints-{tag}.json"), "w") as fh:
        json.dump(cps, fh)
    with open(os.path.join(a.out, f"progress-{tag}.json"), "w") as fh:
        json.dump(events, fh)
    cg.remove()
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--keys", type=int, default=100_000_000)
    p.add_argument("--events", type=int, default=200_000_000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--interval", default="1s")
    p.add_argument("--limit", type=int, default=2 << 30)
    p.add_argument("--kill-at-checkpoint", type=int, default=0)
    p.add_argument("--kill-at-events", type=float, default=0,
                   help="SIGKILL at the first checkpoint completed after this many events")
    p.add_argument("--resume-only", action="store_true",
                   help="only the resumed run, from OUT's checkpoints (after a kill by hand); "
                   "--events may be lower than the killed run's: the generator's events "
                   "0..N are the same, so the run ends earlier and --verify checks 0..N")
    p.add_argument("extra", nargs="*", help="more flags for weir run (after --)")
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.out = os.path.abspath(a.out)
    a.chk = os.path.join(a.out, "chk")
    a.state = os.path.join(a.out, "state")
    if a.resume_only:
        shutil.rmtree(a.state, ignore_errors=True)
        os.makedirs(a.state, exist_ok=True)
        report = [run_once(a, "resumed", restore=True)]
    else:
        for d in (a.chk, a.state):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(a.state, exist_ok=True)
        report = [run_once(a, "first", restore=False)]
    if not a.resume_only and (a.kill_at_checkpoint or a.kill_at_events):
        report.append(run_once(a, "resumed", restore=True))
    report.append({"chk_bytes_at_end": du(a.chk)})
    with open(os.path.join(a.out, "report.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
