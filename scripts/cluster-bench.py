#!/usr/bin/env python3
"""The cluster's benchmark rows (issue 24, BENCHMARKS.md): W1 (keyed-count) on 2 worker
processes against one process, the checkpoint duration on the cluster, and the time a
worker's SIGKILL costs.

    cargo build --release -p weir-cli
    scripts/cluster-bench.py [--binary target/release/weir] [--rounds 5] [--events 100000000]
                             [--kills 5] [--only throughput|kill]

Throughput: per round, the three configurations run one after the other (interleaved, so
a change of the machine's load hits all three alike):

* `p2`: one process, `--parallelism 2`;
* `p4`: one process, `--parallelism 4`;
* `2w`: a coordinator and 2 `weir worker --slots 2` processes, `--parallelism 4` (each
  worker runs 2 slices of the pipeline; keyed records cross the exchange between them).

Each is keyed-count over `--events` events and 100,000 keys, exactly-once checkpoints every
1 s to a folder under /tmp, output discarded. Events/s is what the run's summary says
(records read over the executor's duration); CPU is the user + system time of every process
of the configuration (coordinator and workers, from wait4), so events per CPU-second
compares the whole cost. The coordinator's `/api/workers` is polled during the run: the
bytes/s of one exchange stream (w1 → w2) is its growth between the first and last polls
that saw it. The checkpoint durations are the summary's median. `uptime`'s load is printed
beside each run; medians and ratios at the end.

Kill: one cluster (2 workers, 1 slot each, `--parallelism 2`, checkpoints every 1 s, input
paced with `--rate`, restarts 100 ms after a failure: `--restart-strategy fixed-delay`, or
`--strategy exponential-delay` to see the default's delay doubling from kill to kill), a
worker SIGKILLed `--kills` times, 2 s after the previous recovery; after each kill a replacement
worker starts at once (as a supervisor would restart it). Time lost: from the kill to the
first checkpoint completed after it (the coordinator's `/api/checkpoints`: its `end_ms`),
which needs the loss detected, the attempt cancelled, enough workers registered again,
the job redeployed and restored, and one full checkpoint interval of the new attempt.
Also printed: kill to the new attempt's first records (the `weir_job_attempt` gauge
changing and `weir_source_records_total` growing again).
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
import tempfile
import time
import urllib.request

KEYS = 100_000


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except Exception:
        return None


def wait_line(path, needle, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    if needle in line:
                        return line
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited before printing {needle!r}: see {path}")
        time.sleep(0.01)
    raise SystemExit(f"no {needle!r} in {path} within {timeout} s")


def rusage_wait(proc):
    """Waits for proc; its (exit code, CPU seconds)."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru.ru_utime + ru.ru_stime


def job_args(events, p, work, extra=()):
    return [
        "run", "keyed-count", "--events", str(events), "--keys", str(KEYS),
        "--parallelism", str(p), "--checkpoint-interval", "1s",
        "--checkpoint-dir", os.path.join(work, "chk"), "--discard-output",
        *extra,
    ]


def summary(out):
    secs = float(re.search(r"finished in ([0-9.]+) s", out).group(1))
    read = int(re.search(r"— (\d+) records read", out).group(1))
    m = re.search(r"duration median ([0-9.]+) ms", out)
    return secs, read, (float(m.group(1)) if m else None)


def single(binary, events, p):
    work = tempfile.mkdtemp(prefix="weir-bench-")
    try:
        t0 = time.time()
        proc = subprocess.Popen([binary, *job_args(events, p, work, ["--control", "off"])],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out = proc.stdout.read()
        code, cpu = rusage_wait(proc)
        wall = time.time() - t0
        if code != 0:
            raise SystemExit(f"p{p} failed ({code}):\n{out}")
        secs, read, ck = summary(out)
        return {"secs": secs, "read": read, "cpu": cpu, "wall": wall, "ck_median_ms": ck}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_cluster(binary, work, args, workers, slots):
    log = os.path.join(work, "coordinator.log")
    coord = subprocess.Popen(
        [binary, *args, "--workers", str(workers), "--cluster-listen", "127.0.0.1:0",
         "--cluster-token", "bench", "--control", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    address = wait_line(log, "coordinator listening on ", coord).split(
        "coordinator listening on ")[1].split()[0].rstrip(":")
    procs = []
    for i in range(1, workers + 1):
        procs.append(start_worker(binary, work, address, f"w{i}", slots))
    control = wait_line(log, "control endpoint ", coord).split("control endpoint ")[1].split()[0]
    return coord, procs, address, control


def start_worker(binary, work, address, name, slots):
    return subprocess.Popen(
        [binary, "worker", "--coordinator", address, "--cluster-token", "bench",
         "--slots", str(slots), "--name", name],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{name}.log"), "w"))


def cluster(binary, events):
    work = tempfile.mkdtemp(prefix="weir-bench-")
    try:
        t0 = time.time()
        coord, workers, _, control = start_cluster(binary, work, job_args(events, 4, work), 2, 2)
        first = last = None
        ended = None
        while ended is None:
            pid, status, ru = os.wait4(coord.pid, os.WNOHANG)
            if pid != 0:  # reaped here, with its CPU time (poll() would lose it)
                coord.returncode = os.waitstatus_to_exitcode(status)
                ended = (coord.returncode, ru.ru_utime + ru.ru_stime)
                break
            v = get(f"http://{control}/api/workers")
            now = time.time()
            for w in (v or {}).get("workers", []):
                if w["name"] != "w1":
                    continue
                for s in w["streams"]:
                    if s["bytes_sent"] > 0:
                        if first is None:
                            first = (now, s["bytes_sent"])
                        last = (now, s["bytes_sent"])
            time.sleep(0.5)
        out = coord.stdout.read()
        code, cpu = ended
        for w in workers:
            wcode, wcpu = rusage_wait(w)
            cpu += wcpu
            if wcode != 0:
                raise SystemExit(f"a worker failed ({wcode}): see {work}")
        wall = time.time() - t0
        if code != 0:
            raise SystemExit(f"the cluster failed ({code}):\n{out}\nsee {work}")
        secs, read, ck = summary(out)
        rate = None
        if first and last and last[0] > first[0]:
            rate = (last[1] - first[1]) / (last[0] - first[0])
        shutil.rmtree(work, ignore_errors=True)
        return {"secs": secs, "read": read, "cpu": cpu, "wall": wall, "ck_median_ms": ck,
                "stream_bytes_per_s": rate}
    except BaseException:
        print(f"(left {work} for a look)", file=sys.stderr)
        raise


def throughput(a):
    configs = [("p2", lambda: single(a.binary, a.events, 2)),
               ("p4", lambda: single(a.binary, a.events, 4)),
               ("2w", lambda: cluster(a.binary, a.events))]
    rows = {name: [] for name, _ in configs}
    for r in range(a.rounds):
        for name, run in configs:
            before = load()
            x = run()
            x["load"] = before
            rows[name].append(x)
            eps = x["read"] / x["secs"]
            extra = ""
            if name == "2w":
                sb = x["stream_bytes_per_s"]
                extra = f"  stream w1→w2 {sb / 1e6:.1f} MB/s" if sb else "  stream w1→w2 –"
            print(f"round {r + 1} {name}: {eps / 1e6:.2f} M events/s, "
                  f"{x['read'] / x['cpu'] / 1e6:.2f} M per CPU-s, cpu {x['cpu']:.1f} s, "
                  f"checkpoint median {x['ck_median_ms']} ms, load {before}{extra}", flush=True)
    print()
    med = {}
    print("| configuration | events/s (median) | events per CPU-s (median) | checkpoint median (median of runs) | loads |")
    print("|---|---:|---:|---:|---|")
    for name, _ in configs:
        xs = rows[name]
        eps = statistics.median(x["read"] / x["secs"] for x in xs)
        epc = statistics.median(x["read"] / x["cpu"] for x in xs)
        cks = [x["ck_median_ms"] for x in xs if x["ck_median_ms"] is not None]
        ck = statistics.median(cks) if cks else None
        med[name] = (eps, epc)
        print(f"| {name} | {eps / 1e6:.2f} M | {epc / 1e6:.2f} M | "
              f"{'–' if ck is None else f'{ck:.1f} ms'} | {', '.join(x['load'] for x in xs)} |")
    print()
    for base in ("p2", "p4"):
        print(f"2w ÷ {base}: events/s ×{med['2w'][0] / med[base][0]:.3f}, "
              f"events per CPU-s ×{med['2w'][1] / med[base][1]:.3f}")
    sbs = [x["stream_bytes_per_s"] for x in rows["2w"] if x["stream_bytes_per_s"]]
    if sbs:
        print(f"one exchange stream (w1 → w2): median {statistics.median(sbs) / 1e6:.1f} MB/s")


def kill(a):
    work = tempfile.mkdtemp(prefix="weir-kill-")
    # Fixed delay: the default exponential-delay doubles its delay with every failure that
    # follows soon after the last (kills 4 s apart here), which would measure the strategy.
    args = job_args(10**12, 2, work, ["--rate", str(a.rate), "--restart-strategy", a.strategy,
                                      "--restart-delay", "100ms"])
    coord, workers, address, control = start_cluster(a.binary, work, args, 2, 1)
    names = {"w1": workers[0], "w2": workers[1]}
    lost, to_records = [], []
    try:
        def completed():
            v = get(f"http://{control}/api/checkpoints") or {}
            return [c for c in v.get("history", []) if c["status"] == "completed"]

        deadline = time.time() + 60
        while len(completed()) < 3:
            if time.time() > deadline or coord.poll() is not None:
                raise SystemExit(f"no checkpoints on the cluster: see {work}")
            time.sleep(0.1)
        for k in range(a.kills):
            name = "w2" if k % 2 == 0 else "w1"
            attempt = (get(f"http://{control}/api/job") or {}).get("attempt")
            before = load()
            t_kill = time.time()
            names[name].send_signal(signal.SIGKILL)
            names[name].wait()
            replacement = f"{name}-{k + 1}"
            names[name] = start_worker(a.binary, work, address, replacement, 1)
            records_at = None
            while True:
                now = time.time()
                if now - t_kill > 120 or coord.poll() is not None:
                    raise SystemExit(f"no recovery after kill {k + 1}: see {work}")
                j = get(f"http://{control}/api/job") or {}
                if records_at is None and j.get("attempt", attempt) != attempt and j.get("state") == "running":
                    tasks = j.get("tasks", [])
                    if tasks and all(t.get("worker") for t in tasks):
                        records_at = now
                after = [c for c in completed() if c["end_ms"] / 1000 > t_kill and c["trigger_ms"] / 1000 > t_kill]
                if after:
                    t_ck = min(c["end_ms"] for c in after) / 1000
                    break
                time.sleep(0.02)
            lost.append(t_ck - t_kill)
            if records_at:
                to_records.append(records_at - t_kill)
            print(f"kill {k + 1} ({name}): checkpoint after {t_ck - t_kill:.2f} s, "
                  f"redeployed after {'–' if records_at is None else f'{records_at - t_kill:.2f} s'}, "
                  f"load {before}", flush=True)
            time.sleep(2)
        print()
        print(f"time lost to a worker's SIGKILL (kill → first completed checkpoint), median of "
              f"{len(lost)}: {statistics.median(lost):.2f} s (min {min(lost):.2f}, max {max(lost):.2f})")
        if to_records:
            print(f"kill → new attempt running on every worker, median: {statistics.median(to_records):.2f} s")
    finally:
        coord.send_signal(signal.SIGKILL)
        for w in names.values():
            w.send_signal(signal.SIGKILL)
        coord.wait()
        for w in names.values():
            w.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/weir")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--rate", type=int, default=2_000_000, help="events/s of the kill run")
    ap.add_argument("--strategy", default="fixed-delay",
                    help="--restart-strategy of the kill run (exponential-delay: the default's growth)")
    ap.add_argument("--only", choices=["throughput", "kill"])
    a = ap.parse_args()
    if not os.access(a.binary, os.X_OK):
        raise SystemExit(f"no binary {a.binary}: build it with `cargo build --release -p weir-cli` "
                         "or give --binary")
    print(f"machine: {os.cpu_count()} CPUs; binary {a.binary}; load at start {load()}")
    if a.only in (None, "throughput"):
        throughput(a)
    if a.only in (None, "kill"):
        kill(a)


if __name__ == "__main__":
    main()
