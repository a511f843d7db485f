// The Weir dashboard: four pages over the control endpoint's JSON API (/api/job,
// /api/checkpoints, /api/workers) and its actions (POST /checkpoint, /savepoint, /stop). Data is only
// ever put into the page as text (never as HTML). Charts are uPlot's.
"use strict";

const REFRESH_MS = 1000;
const RATE_POINTS = 300;

const page = { "/checkpoints": "checkpoints", "/workers": "workers", "/actions": "actions" }[location.pathname] || "overview";
const $ = (id) => document.getElementById(id);
const rates = [[], []]; // seconds since the epoch, records read per second
let lastRead = null;
let rateChart = null;
let ckChart = null;
let phasesChart = null;
let phasesKey = "";
let selectedId = null; // the checkpoint whose phases are shown; null: the newest completed

function text(el, value) { el.textContent = value === null || value === undefined ? "–" : String(value); }

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (typeof c === "object" && c !== null) { text(td, c.text); if (c.cls) td.className = c.cls; }
    else text(td, c);
    tr.appendChild(td);
  }
  tbody.appendChild(tr);
}

function fill(tableId, rows) {
  const tbody = $(tableId).querySelector("tbody");
  tbody.replaceChildren();
  for (const r of rows) row(tbody, r);
}

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || (path + " answered " + r.status));
  return body;
}

function chart(el, opts, data) {
  const width = Math.max(320, el.clientWidth - 16);
  return new uPlot(Object.assign({ width, height: 220 }, opts), data, el);
}

function showHeader(v) {
  text($("job"), v.job);
  text($("state"), v.state);
  $("state").className = "state " + v.state;
  document.title = "Weir · " + v.job;
}

async function refreshOverview() {
  const v = await api("/api/job");
  showHeader(v);
  text($("records"), v.source_records.toLocaleString("en"));
  text($("attempt"), v.attempt);
  text($("restarts"), v.restarts);
  const now = Date.now() / 1000;
  if (lastRead !== null && now > lastRead.at) {
    const rate = Math.max(0, (v.source_records - lastRead.records) / (now - lastRead.at));
    rates[0].push(now); rates[1].push(rate);
    if (rates[0].length > RATE_POINTS) { rates[0].shift(); rates[1].shift(); }
    text($("rate"), Math.round(rate).toLocaleString("en"));
  }
  lastRead = { at: now, records: v.source_records };
  if (!rateChart) {
    rateChart = chart($("rate-chart"), {
      series: [{}, { label: "records/s", stroke: "#2563eb", fill: "rgba(37,99,235,0.1)", width: 2 }],
      axes: [{}, { size: 70 }],
    }, rates);
  } else {
    rateChart.setData(rates);
  }
  const figures = showOperatorSubtasks(v.operators, now);
  fill("operators", v.operators.map((o) => {
    const f = figures.get(o.uid);
    return [
      o.name, o.uid, o.parallelism, o.chain,
      o.inputs.map((i) => i.from + " (" + i.partitioning + (i.chained ? ", chained" : "") + ")").join(", ") || "—",
      o.records_in ? o.records_in.map((n) => n.toLocaleString("en")).join(" / ") : "chained",
      f ? f.out.toLocaleString("en") : "–",
      f && f.rate !== null ? Math.round(f.rate).toLocaleString("en") : "–",
      f ? lag(f.lag) : "–",
    ];
  }));
  showState(v.state_sizes);
  showTasks(v.tasks || [], now);
  const attempts = v.attempts.slice();
  if (!attempts.some((a) => a.attempt === v.attempt) && v.attempt > 0) {
    attempts.push({ attempt: v.attempt, current: true });
  }
  fill("attempts", attempts.map((a) => [
    a.attempt,
    a.current ? "—" : a.restored_checkpoint === null ? "the beginning" : "checkpoint " + a.restored_checkpoint,
    a.current ? "—" : a.source_records.toLocaleString("en"),
    a.current ? v.state : a.failure ? { text: a.failure, cls: "failed" } : "finished",
  ]));
}

// A watermark lag in milliseconds, readable ("–" when the operator is not in event time).
function lag(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 10000 ? ms.toLocaleString("en") + " ms" : (ms / 1000).toFixed(1) + " s";
}

// Every operator in every subtask: records in and out, in/s and busy share over the last
// refresh, watermark lag. Returns per operator uid its totals (records out, in/s, the
// largest lag) for the operators table.
const lastOperators = new Map();

function showOperatorSubtasks(operators, now) {
  const totals = new Map();
  const rows = [];
  for (const o of operators) {
    const t = { out: 0, rate: null, lag: null };
    for (const f of o.subtasks || []) {
      const key = o.uid + "#" + f.subtask;
      const prev = lastOperators.get(key);
      lastOperators.set(key, { at: now, in: f.records_in, busy: f.busy_ms });
      let rate = null, busy = "–";
      if (prev && now > prev.at) {
        rate = Math.max(0, f.records_in - prev.in) / (now - prev.at);
        const share = Math.max(0, f.busy_ms - prev.busy) / ((now - prev.at) * 1000);
        busy = Math.min(100, Math.round(100 * share)) + " %";
        t.rate = (t.rate || 0) + rate;
      }
      t.out += f.records_out;
      if (f.watermark_lag_ms !== null && (t.lag === null || f.watermark_lag_ms > t.lag)) t.lag = f.watermark_lag_ms;
      rows.push([
        o.name, o.chain, f.subtask + 1, f.records_in.toLocaleString("en"), f.records_out.toLocaleString("en"),
        rate === null ? null : Math.round(rate).toLocaleString("en"), busy,
        { text: lag(f.watermark_lag_ms), cls: f.watermark_lag_ms === null ? "" : "lag" },
      ]);
    }
    if ((o.subtasks || []).length > 0) totals.set(o.uid, t);
  }
  fill("operator-subtasks", rows);
  return totals;
}

// State size per operator and state, from the newest completed checkpoint.
function showState(z) {
  const rows = [];
  for (const o of (z && z.operators) || []) {
    for (const st of o.states) rows.push([o.uid, st.name, st.scope, bytes(st.bytes)]);
  }
  text($("state-of"), z && z.checkpoint_id !== null ? "(checkpoint " + z.checkpoint_id + ")" : "(no checkpoint completed yet)");
  fill("state-sizes", rows);
  fill("state-storage", ((z && z.operators) || []).map((o) => [
    o.uid, bytes(o.new_bytes), bytes(o.shared_bytes), bytes(o.local_disk_bytes),
    o.memory_entries.toLocaleString("en"),
  ]));
}

// Per task, records in and out and where the last refresh interval went: the shares are
// the growth of the task's backpressured and busy milliseconds over the growth of all its
// accounted time (idle, backpressured, busy), so a stalled refresh does not skew them.
const lastTasks = new Map();

function showTasks(tasks, now) {
  const pctOf = (part, whole) => (whole > 0 ? Math.round((100 * part) / whole) + " %" : "–");
  fill("tasks", tasks.map((t) => {
    const key = t.chain + "#" + t.subtask;
    const prev = lastTasks.get(key);
    lastTasks.set(key, { at: now, out: t.records_out, bp: t.backpressured_ms, idle: t.idle_ms, busy: t.busy_ms });
    let rate = null, bp = "–", busy = "–";
    if (prev && now > prev.at) {
      rate = Math.round(Math.max(0, t.records_out - prev.out) / (now - prev.at)).toLocaleString("en");
      const dBp = Math.max(0, t.backpressured_ms - prev.bp);
      const dBusy = Math.max(0, t.busy_ms - prev.busy);
      const whole = dBp + dBusy + Math.max(0, t.idle_ms - prev.idle);
      bp = pctOf(dBp, whole);
      busy = pctOf(dBusy, whole);
    }
    return [t.chain, t.subtask + 1, t.worker || "–", t.records_in.toLocaleString("en"), t.records_out.toLocaleString("en"), rate, bp, busy];
  }));
}

async function refreshCheckpoints() {
  const v = await api("/api/checkpoints");
  showHeader(v);
  text($("ck-completed"), v.counts.completed);
  text($("ck-failed"), v.counts.failed);
  text($("ck-progress"), v.counts.in_progress);
  text($("ck-size"), v.latest_completed ? bytes(v.last_bytes) : null);
  fill("history", v.history.map((c) => [
    c.id,
    c.kind + (c.stop ? " (stop)" : ""),
    c.alignment || "aligned",
    { text: c.status.replace("_", " "), cls: c.status },
    new Date(c.trigger_ms).toLocaleTimeString("en-GB"),
    c.duration_ms === null ? "…" : c.duration_ms + " ms",
    bytes(c.bytes),
    c.path || c.failure || "",
  ]));
  const rows = $("history").querySelectorAll("tbody tr");
  v.history.forEach((c, i) => {
    if (c.status !== "completed") return;
    rows[i].addEventListener("click", () => { selectedId = c.id; refresh(); });
    if (c.id === selectedId) rows[i].classList.add("selected");
  });
  const shown = v.history.find((c) => c.id === selectedId && c.status === "completed") || v.latest_completed;
  if (shown) { showPhases(shown); showTimeline(shown); }
  const done = v.history.filter((c) => c.status === "completed").reverse();
  const data = [done.map((c) => c.id), done.map((c) => c.duration_ms), done.map((c) => c.bytes / 1024)];
  if (!ckChart) {
    ckChart = chart($("ck-chart"), {
      scales: { x: { time: false }, kib: {} },
      series: [
        { label: "checkpoint" },
        { label: "duration (ms)", stroke: "#2563eb", width: 2, points: { show: true } },
        { label: "size (KiB)", stroke: "#15803d", width: 2, scale: "kib", points: { show: true } },
      ],
      axes: [{}, { size: 60 }, { side: 1, scale: "kib", size: 70, grid: { show: false } }],
    }, data);
  } else {
    ckChart.setData(data);
  }
}

// Per subtask, three bars side by side (alignment, sync, async), as uPlot bar series on
// one numeric x axis: subtask i's bars sit at i - 0.25, i and i + 0.25.
function showPhases(c) {
  text($("phases-id"), c.id);
  const subs = c.subtasks;
  const key = c.id + ":" + subs.length;
  if (key === phasesKey) return;
  phasesKey = key;
  const xs = [], align = [], sync = [], asyn = [];
  subs.forEach((s, i) => {
    xs.push(i - 0.25, i, i + 0.25);
    align.push(s.alignment_ms, null, null);
    sync.push(null, s.sync_ms, null);
    asyn.push(null, null, s.async_ms);
  });
  const label = (i) => subs[i] ? subs[i].chain + " " + (subs[i].subtask + 1) : "";
  const bars = uPlot.paths.bars({ size: [0.9, 40] });
  if (phasesChart) phasesChart.destroy();
  phasesChart = chart($("phases-chart"), {
    scales: { x: { time: false, range: [-0.6, Math.max(0.6, subs.length - 0.4)] } },
    series: [
      { label: "subtask", value: (u, x) => x === null ? "–" : label(Math.round(x)) },
      { label: "alignment (ms)", stroke: "#a16207", fill: "rgba(161,98,7,0.6)", paths: bars, points: { show: false } },
      { label: "sync (ms)", stroke: "#b91c1c", fill: "rgba(185,28,28,0.6)", paths: bars, points: { show: false } },
      { label: "async (ms)", stroke: "#2563eb", fill: "rgba(37,99,235,0.6)", paths: bars, points: { show: false } },
    ],
    axes: [
      { splits: () => subs.map((_, i) => i), values: (u, splits) => splits.map(label), size: 40 },
      { size: 60 },
    ],
  }, [xs, align, sync, asyn]);
}

// The timeline of checkpoint c: one row per subtask, one segment per phase, placed by the
// instants the tasks recorded (milliseconds after the trigger) on one shared scale, so the
// subtask that acknowledged last stands out. Plain positioned elements (text only, no
// HTML from data), rebuilt only when another checkpoint is shown.
const SEGMENTS = [
  ["barrier", "trigger_ms", "barrier_ms", "barrier in flight"],
  ["alignment", "barrier_ms", "sync_start_ms", "alignment"],
  ["sync", "sync_start_ms", "sync_end_ms", "synchronous part"],
  ["queued", "sync_end_ms", "async_start_ms", "waiting for a writer"],
  ["async", "async_start_ms", "async_end_ms", "asynchronous part"],
  ["ack", "async_end_ms", "ack_ms", "acknowledgement on its way"],
];
let timelineKey = "";

function showTimeline(c) {
  text($("timeline-id"), c.id);
  const key = c.id + ":" + c.subtasks.length;
  if (key === timelineKey) return;
  timelineKey = key;
  const box = $("timeline");
  box.replaceChildren();
  const subs = c.subtasks.filter((s) => s.timeline);
  if (subs.length === 0) { text(box, "no phase times recorded for this checkpoint"); return; }
  const end = Math.max(1e-3, c.duration_ms || 0, ...subs.map((s) => s.timeline.ack_ms));
  const slowest = subs.reduce((a, s) => (s.timeline.ack_ms > a.timeline.ack_ms ? s : a));
  const pct = (ms) => (Math.max(0, Math.min(ms, end)) / end) * 100;
  for (const s of subs) {
    const t = Object.assign({ trigger_ms: 0 }, s.timeline);
    const line = document.createElement("div");
    line.className = "tl-row" + (s === slowest ? " slowest" : "");
    const label = document.createElement("span");
    label.className = "tl-label";
    text(label, s.chain + " " + (s.subtask + 1));
    const track = document.createElement("span");
    track.className = "tl-track";
    for (const [cls, from, to, what] of SEGMENTS) {
      const a = t[from], b = t[to];
      if (!(b > a)) continue;
      const seg = document.createElement("span");
      seg.className = "tl-seg " + cls;
      seg.style.left = pct(a) + "%";
      seg.style.width = Math.max(0, pct(b) - pct(a)) + "%";
      seg.title = what + ": " + a.toFixed(2) + " → " + b.toFixed(2) + " ms";
      track.appendChild(seg);
    }
    line.append(label, track);
    box.appendChild(line);
  }
  const axis = document.createElement("div");
  axis.className = "tl-row tl-axis";
  const spacer = document.createElement("span");
  spacer.className = "tl-label";
  const ticks = document.createElement("span");
  ticks.className = "tl-track";
  for (let i = 0; i <= 4; i++) {
    const tick = document.createElement("span");
    tick.className = "tl-tick";
    tick.style.left = i * 25 + "%";
    text(tick, ((end * i) / 4).toFixed(end < 40 ? 1 : 0) + " ms");
    ticks.appendChild(tick);
  }
  axis.append(spacer, ticks);
  box.appendChild(axis);
}

// The workers (a job in one process: itself, as one local worker) and their exchange
// streams, with bytes per second over the last refresh.
const lastStreams = new Map();

async function refreshWorkers() {
  const v = await api("/api/workers");
  showHeader(v);
  text($("workers-mode"), v.cluster
    ? "The job runs on " + v.workers.length + " worker" + (v.workers.length === 1 ? "" : "s") + "; this endpoint is their coordinator's."
    : "Not a cluster: the job runs in this one process, shown as one local worker.");
  fill("workers", v.workers.map((w) => [
    w.name, w.id, w.address, w.slots,
    w.heartbeat_age_ms === null ? "—" : w.heartbeat_age_ms.toLocaleString("en") + " ms",
    { text: w.lost ? "lost: " + w.lost : w.state, cls: w.lost ? "failed" : "" },
    w.subtasks.map((s) => (s.chain || s.task_uid) + " " + (s.subtask + 1)).join(", ") || "—",
  ]));
  const now = Date.now() / 1000;
  const rows = [];
  for (const w of v.workers) {
    for (const st of w.streams) {
      const key = w.id + ">" + st.peer;
      const prev = lastStreams.get(key);
      lastStreams.set(key, { at: now, sent: st.bytes_sent, received: st.bytes_received });
      const per = (n, p) => (prev && now > prev.at && n >= p ? bytes((n - p) / (now - prev.at)) + "/s" : "–");
      rows.push([
        w.name, st.peer_name || "worker " + st.peer,
        bytes(st.bytes_sent), per(st.bytes_sent, prev && prev.sent),
        bytes(st.bytes_received), per(st.bytes_received, prev && prev.received),
        st.permit_waits.toLocaleString("en"), st.permit_wait_ms.toFixed(1) + " ms",
      ]);
    }
  }
  fill("streams", rows);
}

async function act(path, question, body) {
  if (!window.confirm(question)) return;
  const out = $("action-result");
  const buttons = document.querySelectorAll(".actions button");
  buttons.forEach((b) => { b.disabled = true; });
  text(out, "working…");
  try {
    const r = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Weir-Action": "1" },
      body: JSON.stringify(body || {}),
    });
    const v = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(v.error || (path + " answered " + r.status));
    text(out, (path === "/checkpoint" ? "checkpoint " : "savepoint ") + v.id + " completed: " + v.path);
  } catch (e) {
    text(out, "failed: " + e.message);
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

async function refresh() {
  try {
    if (page === "overview") await refreshOverview();
    else if (page === "checkpoints") await refreshCheckpoints();
    else if (page === "workers") await refreshWorkers();
    else showHeader(await api("/api/job"));
    $("error").hidden = true;
  } catch (e) {
    // The job ended and its process is gone, or the token is missing: say so, keep the
    // last data on screen.
    text($("error"), "cannot reach the job: " + e.message);
    $("error").hidden = false;
  }
}

function start() {
  $("page-" + page).hidden = false;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === page) a.classList.add("active");
  }
  $("do-checkpoint").addEventListener("click", () => act("/checkpoint", "Trigger a checkpoint now?"));
  $("do-savepoint").addEventListener("click", () => act("/savepoint", "Take a savepoint? The job goes on."));
  $("do-stop").addEventListener("click", () => act("/stop", "Stop the job with a savepoint? It keeps its state as it is, to be resumed.", { drain: false }));
  $("do-drain").addEventListener("click", () => act("/stop", "Drain and stop the job? Its input ends first, so operators emit what they hold, then the savepoint is taken.", { drain: true }));
  refresh();
  setInterval(refresh, REFRESH_MS);
}

start();
