// The dagnats console: plain JavaScript over the REST API and its server-sent event streams.
// No framework, no build step. The token (when the API has one) lives in sessionStorage, so it
// is asked once per tab and goes only in the Authorization header, never in a URL. Streams are
// read with fetch() and a stream reader (EventSource cannot send that header).
"use strict";

const TOKEN_KEY = "dagnats.token";
const LIVE_POLL_MS = 1000; // runs list, run page and inputs refresh
const HEALTH_POLL_MS = 5000;
const RECONNECT_DELAYS_MS = [300, 1000, 2000, 5000]; // a stream's reconnect backoff
const RUNS_PAGE_SIZE = 50;
const RUN_STATUSES = ["running", "completed", "failed", "cancelled"];
const FINISHED = new Set(["completed", "failed", "cancelled"]);
const INPUT_WAIT = "20s"; // one long poll of an input's state
const INPUT_FINAL = new Set(["done", "withdrawn", "unanswered"]);
const RESTART_LIMIT_REASON = "restart_limit";

const $ = (sel, root = document) => root.querySelector(sel);

// --- small helpers --------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

const json = (v) => JSON.stringify(v, null, 2);
const short = (v, n = 80) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
};
const when = (ms) => (ms ? new Date(ms).toLocaleString() : "");
function took(from, to) {
  if (!from) return "";
  const s = ((to || Date.now()) - from) / 1000;
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}
const status = (s) => el("span", { class: `status ${s}`, "data-status": s }, s);
const enc = encodeURIComponent;
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

// --- problems a person can act on -----------------------------------------------------------

const problems = new Map(); // kind -> message, shown together in the banner

function setProblem(kind, message) {
  if (message) problems.set(kind, message);
  else problems.delete(kind);
  const box = $("#problem");
  box.replaceChildren(...[...problems.values()].map((m) => el("div", {}, m)));
  box.hidden = problems.size === 0;
}

// --- the API --------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, { method = "GET", body, headers = {}, signal } = {}) {
  const h = { ...headers };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, {
      method, headers: h, signal, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (signal && signal.aborted) throw e;
    setProblem("api", "The API does not answer: is the dagnats process running?");
    throw new ApiError(0, "unreachable", "the API does not answer");
  }
  setProblem("api", null);
  if (res.status === 401) {
    askToken(token ? "That token was refused (401): check it and try again." : null);
    throw new ApiError(401, "unauthorized", "this API needs a token");
  }
  if (!res.ok) {
    let err = {};
    try { err = (await res.json()).error || {}; } catch (_) { /* not JSON */ }
    if (res.status === 503) checkHealth();
    throw new ApiError(res.status, err.code || `http_${res.status}`, err.message || res.statusText);
  }
  return res;
}

async function getJson(path, opts) {
  const res = await api(path, opts);
  return res.status === 204 ? null : res.json();
}

// The error of a page's main read, said on the page.
function explain(e) {
  if (e.code === "run_not_found") return "This run does not exist: it was purged, or the id is wrong.";
  if (e.code === "step_not_found") return "This run has no such step.";
  if (e.status === 503) return "NATS is not answering: the API cannot read runs until it is back.";
  if (e.status === 401) return "Waiting for a valid token.";
  return `${e.message} (${e.code || e.status})`;
}

// --- token ----------------------------------------------------------------------------------

function askToken(message) {
  const dialog = $("#token-dialog");
  const err = $("#token-error");
  err.textContent = message || "";
  err.hidden = !message;
  $("#forget-token").hidden = true;
  if (!dialog.open) dialog.showModal();
  $("#token-input").focus();
}

function setupToken() {
  $("#token-form").addEventListener("submit", () => {
    sessionStorage.setItem(TOKEN_KEY, $("#token-input").value);
    $("#token-input").value = "";
    render();
  });
  $("#token-dialog").addEventListener("cancel", (ev) => ev.preventDefault());
  $("#forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    render();
  });
}

// --- health ---------------------------------------------------------------------------------

async function checkHealth() {
  const badge = $("#health");
  try {
    const res = await fetch("/healthz", { cache: "no-store" });
    const body = await res.json();
    const up = body.nats === "up";
    badge.className = `health ${up ? "ok" : "down"}`;
    badge.textContent = up ? "NATS up" : "NATS down";
    setProblem("api", null);
    setProblem("nats", up ? null : "NATS is down (/healthz reports nats: down): runs cannot move until it is back.");
  } catch (_) {
    badge.className = "health down";
    badge.textContent = "API down";
    setProblem("api", "The API does not answer: is the dagnats process running?");
  }
}

// --- server-sent events over fetch ----------------------------------------------------------

// Reads one SSE response, calling onEvent({event, data, id}) per event; returns true when an
// `end` event closed it, false when the connection closed without one.
async function readEvents(res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const ev = { event: "message", data: "", id: null };
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") ev.event = val;
        else if (field === "data") data.push(val);
        else if (field === "id") ev.id = val;
      }
      if (!data.length && ev.id === null) continue;
      ev.data = data.join("\n");
      onEvent(ev);
      if (ev.event === "end") { reader.cancel().catch(() => {}); return true; }
    }
  }
}

// Follows a stream until its `end` event or the signal, reconnecting after a blip; with
// `resume`, the reconnect sends Last-Event-ID so nothing is repeated or skipped.
async function follow(path, { signal, resume, onEvent, onState }) {
  let lastId = null;
  let failures = 0;
  while (!signal.aborted) {
    const headers = { Accept: "text/event-stream" };
    if (resume && lastId !== null) headers["Last-Event-ID"] = lastId;
    try {
      const res = await api(path, { headers, signal });
      onState("live", failures ? "reconnected" : "");
      failures = 0;
      const ended = await readEvents(res, (ev) => {
        if (ev.id !== null) lastId = ev.id;
        onEvent(ev);
      });
      if (ended) return;
      onState("reconnecting", "the stream was cut; reconnecting");
    } catch (e) {
      if (signal.aborted) return;
      if (e.status === 401) return;
      if (e.status === 404) { onState("gone", explain(e)); return; }
      onState("reconnecting", `${e.message || e}; reconnecting`);
    }
    await sleep(RECONNECT_DELAYS_MS[Math.min(failures, RECONNECT_DELAYS_MS.length - 1)], signal);
    failures += 1;
  }
}

// The states an input has gone through, read from the submission rather than from the polls
// that saw it (a turn can place and answer an input between two polls): every input starts
// queued; `placed_iteration` is set from placement on; done follows placed.
function statesOf(sub) {
  const placed = sub.placed_iteration != null || sub.status === "placed" || sub.status === "done";
  const states = ["queued"];
  if (placed) states.push("placed");
  if (sub.status !== "queued" && sub.status !== "placed") states.push(sub.status);
  return states;
}

// --- pages ----------------------------------------------------------------------------------

let current = null; // the AbortController of the page on screen

function render() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  $("#forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
  const hash = location.hash.replace(/^#/, "") || "/runs";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const main = $("#main");
  if (parts[0] === "runs" && parts.length === 4 && parts[2] === "steps") {
    stepPage(main, parts[1], parts[3], signal);
  } else if (parts[0] === "runs" && parts.length === 2) {
    runPage(main, parts[1], signal);
  } else {
    runsPage(main, params, signal);
  }
}

// Calls `tick` now and every LIVE_POLL_MS until the signal (or tick returns false).
async function live(signal, tick) {
  while (!signal.aborted) {
    let again = true;
    try { again = await tick(); } catch (e) { if (signal.aborted) return; }
    if (again === false) return;
    await sleep(LIVE_POLL_MS, signal);
  }
}

function runsPage(main, params, signal) {
  const statusSel = el("select", { name: "status" }, el("option", { value: "" }, "any status"),
    RUN_STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)));
  const wfInput = el("input", { name: "workflow", placeholder: "workflow", value: params.get("workflow") || "" });
  const form = el("form", { class: "controls", id: "filter" }, "Status", statusSel, "Workflow", wfInput,
    el("button", { type: "submit" }, "filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    if (statusSel.value) q.set("status", statusSel.value);
    if (wfInput.value.trim()) q.set("workflow", wfInput.value.trim());
    if (params.get("limit")) q.set("limit", params.get("limit"));
    location.hash = `#/runs${q.toString() ? "?" + q : ""}`;
  });
  const body = el("tbody");
  const table = el("table", { id: "runs" }, el("thead", {}, el("tr", {},
    ["run", "workflow", "status", "started", "duration", "error"].map((h) => el("th", {}, h)))), body);
  const note = el("p", { class: "muted", id: "runs-note" });
  const cursors = [null]; // cursor of each page seen; the last is the page on screen
  const prev = el("button", { type: "button", id: "prev" }, "← previous");
  const next = el("button", { type: "button", id: "next" }, "next →");
  const pageNo = el("span", { class: "muted" });
  let nextCursor = null;
  prev.addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); refresh(); } });
  next.addEventListener("click", () => { if (nextCursor) { cursors.push(nextCursor); refresh(); } });
  main.replaceChildren(el("h1", {}, "Runs"), form, table, note, el("div", { class: "controls" }, prev, pageNo, next));

  async function refresh() {
    const q = new URLSearchParams({ limit: String(RUNS_PAGE_SIZE) });
    for (const k of ["status", "workflow", "limit"]) if (params.get(k)) q.set(k, params.get(k));
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set("cursor", cursor);
    try {
      const page = await getJson(`/runs?${q}`, { signal });
      nextCursor = page.next_cursor;
      const runs = page.runs; // newest first, across pages too (the API's run index)
      body.replaceChildren(...runs.map((r) => el("tr", { "data-run": r.run_id },
        el("td", {}, el("a", { href: `#/runs/${enc(r.run_id)}`, class: "mono" }, r.run_id)),
        el("td", {}, r.workflow), el("td", {}, status(r.status)), el("td", {}, when(r.created_at_ms)),
        el("td", {}, took(r.created_at_ms, r.finished_at_ms)), el("td", { class: "error" }, r.error || ""))));
      note.textContent = runs.length ? "" : "No runs match.";
      note.className = "muted";
      prev.disabled = cursors.length === 1;
      next.disabled = !nextCursor;
      pageNo.textContent = `page ${cursors.length}`;
    } catch (e) {
      if (signal.aborted) return;
      note.textContent = explain(e);
      note.className = "error";
    }
  }
  live(signal, refresh);
}

function runPage(main, runId, signal) {
  const head = el("h1", {}, "Run ", el("code", {}, runId), " ", el("span", { id: "run-status" }));
  const facts = el("p", { id: "run-facts" });
  const message = el("p", { id: "run-message" });
  const reason = el("input", { id: "cancel-reason", placeholder: "reason", value: "cancelled from the console" });
  const cancel = el("button", { type: "button", id: "cancel" }, "cancel run");
  const purge = el("button", { type: "button", id: "purge" }, "purge (delete for good)");
  const steps = el("tbody");
  const input = el("pre", { id: "run-input" });
  const output = el("pre", { id: "run-output" });
  main.replaceChildren(el("p", {}, el("a", { href: "#/runs" }, "← runs")), head, facts,
    el("div", { class: "controls" }, reason, cancel, purge), message,
    el("h2", {}, "Steps"),
    el("table", { id: "steps" }, el("thead", {}, el("tr", {}, ["step", "status", "iteration", "attempt",
      "iterations", "started", "duration", "timers", "child run", "error / reason", ""].map((h) => el("th", {}, h)))), steps),
    el("div", { class: "cols" }, el("div", {}, el("h2", {}, "Input"), input), el("div", {}, el("h2", {}, "Output"), output)));
  const say = (text, bad) => { message.textContent = text; message.className = bad ? "error" : "muted"; };

  cancel.addEventListener("click", async () => {
    try {
      await getJson(`/runs/${enc(runId)}/cancel`, { method: "POST", body: { reason: reason.value || "cancelled" }, signal });
      say("Cancel requested: the engine cancels the run's steps.");
    } catch (e) { say(`Cancel refused: ${explain(e)}`, true); }
  });
  purge.addEventListener("click", async () => {
    try {
      await api(`/runs/${enc(runId)}`, { method: "DELETE", signal });
      say("Purged: the run, its history and its journals are deleted.");
    } catch (e) { say(`Purge refused: ${explain(e)}`, true); }
  });

  let readFailed = false; // the message says why the last read failed: cleared when one works
  live(signal, async () => {
    let run;
    try {
      run = await getJson(`/runs/${enc(runId)}`, { signal });
    } catch (e) {
      if (signal.aborted) return false;
      say(explain(e), true);
      readFailed = true;
      if (e.code === "run_not_found") { cancel.disabled = purge.disabled = true; return false; }
      return true;
    }
    if (readFailed) { say(""); readFailed = false; }
    const done = FINISHED.has(run.status);
    $("#run-status").replaceChildren(status(run.status));
    facts.replaceChildren(`workflow ${run.workflow} · started ${when(run.created_at_ms)} · `,
      done ? `finished ${when(run.finished_at_ms)} · took ${took(run.created_at_ms, run.finished_at_ms)}`
        : `running for ${took(run.created_at_ms)}`,
      run.error ? el("span", { class: "error" }, ` · ${run.error}`) : "",
      run.failed_step ? ` (step ${run.failed_step})` : "");
    cancel.hidden = reason.hidden = done;
    purge.hidden = !done;
    steps.replaceChildren(...run.steps.map((s) => el("tr", { "data-step": s.step_id },
      el("td", {}, el("code", {}, s.step_id)), el("td", {}, status(s.status)),
      el("td", {}, s.iteration ?? ""), el("td", {}, s.attempt ?? ""), el("td", {}, s.iterations),
      el("td", {}, when(s.started_at_ms)), el("td", {}, took(s.started_at_ms, s.finished_at_ms)),
      timersCell(s),
      el("td", {}, s.child_run_id ? el("a", { href: `#/runs/${enc(s.child_run_id)}`, class: "mono" }, s.child_run_id) : ""),
      el("td", { class: "error" }, [s.error, s.reason].filter(Boolean).join(" · "),
        // A running step whose task type no worker polls: it will not move until one starts.
        s.no_worker ? el("div", { class: "no-worker", "data-hint": "no_worker" }, s.no_worker.message) : ""),
      el("td", {}, s.status === "pending" ? "" :
        el("a", { href: `#/runs/${enc(runId)}/steps/${enc(s.step_id)}`, class: "journal-link" }, "journal →")))));
    input.textContent = json(run.input);
    output.textContent = run.output === null ? "" : json(run.output);
    return true; // keep polling: a finished run may still be purged from elsewhere
  });
}

// A step's timers, from its view: why a waiting step waits and when it wakes, and the step
// timeout and max_duration that keep counting while it waits (each with the time left).
const WAITING_FOR = { retry: "retry", loop_delay: "loop delay", wait: "wait", pause: "pause" };
function timersCell(s) {
  const left = (ms) => (ms > Date.now() ? `in ${took(Date.now(), ms)}` : "due");
  const lines = [];
  if (s.waiting_for) {
    const wake = s.wake_at_ms ? `wakes ${when(s.wake_at_ms)} (${left(s.wake_at_ms)})` : "no wake-up timer";
    lines.push(el("div", { class: "timer", "data-timer": "wake", "data-due": s.wake_at_ms ?? "" },
      `${WAITING_FOR[s.waiting_for] || s.waiting_for}: ${wake}`, s.wakes_on_input ? ", or on an input" : ""));
  }
  if (s.timeout_at_ms) lines.push(el("div", { class: "timer", "data-timer": "timeout", "data-due": s.timeout_at_ms },
    `timeout ${when(s.timeout_at_ms)} (${left(s.timeout_at_ms)})`));
  if (s.max_duration_at_ms) lines.push(el("div", { class: "timer", "data-timer": "max_duration", "data-due": s.max_duration_at_ms },
    `max_duration ${when(s.max_duration_at_ms)} (${left(s.max_duration_at_ms)})`));
  return el("td", { class: "timers" }, lines);
}

// The journal's timeline: one row per record, its marks kept right as later records arrive
// (a model response becomes "reused" when a later claim of its attempt recovers it).
class Timeline {
  constructor(box) {
    this.box = box;
    this.claims = new Map(); // "iteration/attempt" -> [seq of claims]
    this.latestClaim = null;
    this.rows = new Map(); // event id (the record's place: "seq", or "seq.k" inside a message) -> row
    this.intents = new Map(); // "iteration/attempt/call" -> intent record
  }

  // `id`: the event's id, unique per record (the records of one message share its seq).
  add(entry, id) {
    const key = id ?? String(entry.seq);
    if (this.rows.has(key)) return; // never twice (a resumed stream repeats nothing)
    const rec = entry.record || {};
    const ia = `${rec.iteration}/${rec.attempt}`;
    const marks = [];
    let detail = "";
    switch (entry.type) {
      case "claim": {
        const earlier = this.claims.get(ia) || [];
        if (earlier.length) {
          marks.push(["recovered", `new holder recovered attempt ${rec.attempt} (claim seq ${earlier[earlier.length - 1]})`]);
          for (const row of this.rows.values()) {
            const r = row.rec;
            if (row.seq < entry.seq && `${r.iteration}/${r.attempt}` === ia &&
                (row.type === "model" || (row.type === "tool.result" && !r.interrupted))) this.mark(row, "reused", "reused");
          }
        } else if (rec.attempt > 1) marks.push(["retry", `attempt ${rec.attempt} (a retry)`]);
        else detail = `new holder, attempt ${rec.attempt}`;
        this.claims.set(ia, [...earlier, entry.seq]);
        this.latestClaim = rec.claim_id;
        break;
      }
      case "model": detail = `call ${rec.call}: ${short(rec.response)}`; marks.push(["new", "new"]); break;
      case "tool.intent":
        this.intents.set(`${ia}/${rec.call}`, rec);
        detail = `call ${rec.call}: ${rec.name}(${short(rec.input, 50)}) · ${rec.replay} · key ${rec.key}`;
        if (rec.group != null) detail += ` · parallel ${rec.call - rec.group + 1}/${rec.group_size}`;
        break;
      case "tool.output": detail = `call ${rec.call} partial: ${short(rec.chunk)}`; break;
      case "tool.result": {
        if (rec.interrupted) {
          const intent = this.intents.get(`${ia}/${rec.call}`);
          const name = intent ? intent.name : `call ${rec.call}`;
          const why = intent && intent.replay === "unsafe" ? "unsafe, so not run again" : "not rerun";
          const what = rec.cancelled_by != null ? `cancelled: call ${rec.cancelled_by} of its parallel group failed` : `its holder died mid-call; ${why}`;
          detail = `${name}: ${what}` + (rec.partial && rec.partial.length ? `; partial ${short(rec.partial, 40)}` : "");
          marks.push(["interrupted", rec.cancelled_by != null ? "cancelled" : "interrupted"]);
        } else {
          detail = `call ${rec.call}: ` + (rec.error ? `error ${rec.error}` : short(rec.output));
          marks.push(["new", "new"]);
        }
        break;
      }
      case "input.placed": detail = `${rec.mode} ${rec.request_id}: ${short(rec.content, 60)}`; marks.push(["input", rec.mode]); break;
      case "commit":
        detail = [rec.action, rec.wait ? "then wait" : "", rec.output != null ? `output ${short(rec.output, 40)}` : "",
          rec.error ? `error ${rec.error}` : "", rec.reason ? `reason ${rec.reason}` : ""].filter(Boolean).join(", ");
        if (rec.action === "fail" && rec.reason === RESTART_LIMIT_REASON) marks.push(["failed", "restart limit"]);
        break;
      default:
        detail = entry.error ? `does not decode: ${entry.error}` : "";
    }
    if (entry.type !== "claim" && rec.claim_id && this.latestClaim && rec.claim_id !== this.latestClaim) {
      marks.push(["fenced", "written after its holder was fenced"]);
    }
    const summary = el("summary", {}, el("span", { class: "mono" }, `#${entry.seq}`), " ",
      el("b", {}, entry.type), ` it ${rec.iteration ?? "?"} att ${rec.attempt ?? "?"} · ${detail}`);
    const node = el("details", { "data-seq": entry.seq, "data-type": entry.type }, summary, el("pre", {}, json(entry)));
    const row = { rec, seq: entry.seq, type: entry.type, node, summary };
    this.rows.set(key, row);
    for (const [kind, text] of marks) this.mark(row, kind, text);
    this.box.append(node);
  }

  mark(row, kind, text) {
    const old = row.summary.querySelector(".mark.new");
    if (kind !== "new" && old) old.remove();
    row.node.dataset.mark = kind;
    row.summary.append(el("span", { class: `mark ${kind}` }, text));
  }
}

function stepPage(main, runId, stepId, signal) {
  const base = `/runs/${enc(runId)}/steps/${enc(stepId)}`;
  const stepStatus = el("span", { id: "step-status" });
  const streamState = el("span", { id: "stream-state", class: "stream-state muted" }, "connecting…");
  const checkBtn = el("button", { type: "button", id: "journal-check" }, "journal check");
  const checkOut = el("div", { id: "check-result" });
  const box = el("div", { id: "timeline", class: "timeline" });
  const preview = el("pre", { id: "preview" });
  const previewState = el("span", { id: "preview-state", class: "stream-state muted" });
  const mode = el("select", { id: "input-mode" }, el("option", { value: "steer" }, "steer"), el("option", { value: "follow_up" }, "follow-up"));
  const text = el("textarea", { id: "input-text", rows: 2, cols: 40, placeholder: 'text, or JSON such as {"text": "..."}' });
  const sendNote = el("span", { id: "input-note" });
  const form = el("form", { id: "input-form", class: "controls" }, mode, text, el("button", { type: "submit" }, "send"), sendNote);
  const inputs = el("tbody", { id: "inputs" });
  main.replaceChildren(
    el("p", {}, el("a", { href: `#/runs/${enc(runId)}` }, `← run ${runId}`)),
    el("h1", {}, "Step ", el("code", {}, stepId), " ", stepStatus),
    el("div", { class: "controls" }, "journal stream:", streamState, checkBtn), checkOut,
    el("div", { class: "cols" },
      el("div", {}, el("h2", {}, "Journal"), box),
      el("div", {}, el("h2", {}, "Live preview ", previewState), preview,
        el("h2", {}, "Inputs"), form,
        el("table", {}, el("thead", {}, el("tr", {}, ["request", "mode", "content", "status", ""].map((h) => el("th", {}, h)))), inputs))));

  // Inputs: those sent from this tab (kept for the tab) and those seen placed in the journal.
  const storeKey = `dagnats.inputs.${runId}.${stepId}`;
  const knownInputs = new Set(JSON.parse(sessionStorage.getItem(storeKey) || "[]"));
  const seen = new Map(); // request id -> submission, with the states seen (`history`)
  const watching = new Set();
  const remember = (id) => {
    if (!knownInputs.has(id)) {
      knownInputs.add(id);
      sessionStorage.setItem(storeKey, JSON.stringify([...knownInputs]));
    }
    if (!watching.has(id)) { watching.add(id); watchInput(id); }
  };
  // Each input is long-polled (`wait` + `since`): every change of state comes back at once.
  async function watchInput(id) {
    let since = null;
    while (!signal.aborted) {
      let sub;
      try {
        sub = await getJson(`${base}/inputs/${enc(id)}${since ? `?wait=${INPUT_WAIT}&since=${since}` : ""}`, { signal });
      } catch (e) {
        if (signal.aborted || e.status === 404 || e.status === 401) return;
        await sleep(LIVE_POLL_MS, signal);
        continue;
      }
      seen.set(id, { ...sub, history: statesOf(sub) });
      drawInputs();
      if (INPUT_FINAL.has(sub.status)) return;
      since = sub.status;
    }
  }
  for (const id of [...knownInputs]) remember(id);
  const timeline = new Timeline(box);
  follow(`${base}/journal?follow=1`, {
    signal, resume: true,
    onEvent(ev) {
      const data = JSON.parse(ev.data);
      if (ev.event === "end") {
        const gone = data.run_status === "unknown";
        streamState.textContent = gone ? "stream ended: the run is gone (purged)"
          : `stream ended: step ${data.step_status}, run ${data.run_status}`;
        streamState.className = `stream-state ${gone ? "error" : "muted"}`;
        streamState.dataset.state = "ended";
      } else {
        box.dataset.received = String(Number(box.dataset.received || 0) + 1);
        timeline.add(data, ev.id);
        if (data.type === "input.placed") remember(data.record.request_id);
      }
    },
    onState(state, note) {
      streamState.dataset.state = state;
      streamState.textContent = state === "live" ? `live${note ? " (" + note + ")" : ""}` : note;
      streamState.className = `stream-state ${state === "live" ? "muted" : "error"}`;
    },
  });
  // The preview has no ids (it is not a record): a reconnect gets what is put from then on.
  follow(`${base}/preview`, {
    signal, resume: false,
    onEvent(ev) {
      if (ev.event === "end") { previewState.textContent = "(ended)"; return; }
      const chunk = JSON.parse(ev.data);
      preview.textContent += chunk.text ?? `[${chunk.base64.length} base64 chars]`;
    },
    onState(state, note) { previewState.textContent = state === "live" ? "(live)" : `(${note})`; },
  });

  checkBtn.addEventListener("click", async () => {
    checkOut.replaceChildren("checking…");
    try {
      const v = await getJson(`${base}/journal/check`, { signal });
      checkOut.replaceChildren(el("p", { class: v.ok ? "" : "error", "data-ok": String(v.ok) }, v.summary),
        v.violations.length ? el("ul", {}, v.violations.map((x) => el("li", {}, `[${x.rule}] ${x.seq != null ? "seq " + x.seq + ": " : ""}${x.message}`))) : "");
    } catch (e) { checkOut.replaceChildren(el("p", { class: "error" }, explain(e))); }
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const raw = text.value.trim();
    if (!raw) { sendNote.textContent = "Write something first."; return; }
    let content = { text: raw };
    if (/^[[{]/.test(raw)) {
      try { content = JSON.parse(raw); } catch (_) { sendNote.textContent = "That is not valid JSON."; return; }
    }
    const requestId = `console-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
    try {
      const sub = await getJson(`${base}/inputs`, { method: "POST", body: { request_id: requestId, mode: mode.value, content }, signal });
      seen.set(requestId, { ...sub, history: statesOf(sub) });
      remember(requestId);
      text.value = "";
      sendNote.textContent = `sent ${requestId}: ${sub.status}`;
      drawInputs();
    } catch (e) { sendNote.textContent = `Not sent: ${explain(e)}`; }
  });
  function drawInputs() {
    inputs.replaceChildren(...[...seen.values()].sort((a, b) => a.order - b.order).map((s) => el("tr", { "data-request": s.request_id, "data-history": s.history.join(" ") },
      el("td", { class: "mono" }, s.request_id), el("td", {}, s.mode), el("td", {}, short(s.content, 50)),
      el("td", {}, s.history.map(status), s.placed_iteration != null ? ` (iteration ${s.placed_iteration})` : ""),
      el("td", {}, s.status === "queued" ? el("button", { type: "button", class: "withdraw", onclick: () => withdraw(s.request_id) }, "withdraw") : ""))));
  }
  async function withdraw(id) {
    try {
      await api(`${base}/inputs/${enc(id)}`, { method: "DELETE", signal });
    } catch (e) { sendNote.textContent = `Not withdrawn: ${explain(e)}`; }
  }
  live(signal, async () => {
    try {
      const run = await getJson(`/runs/${enc(runId)}`, { signal });
      const step = run.steps.find((s) => s.step_id === stepId);
      stepStatus.replaceChildren(step ? status(step.status) : "");
    } catch (e) {
      if (signal.aborted) return false;
      stepStatus.replaceChildren(el("span", { class: "error" }, explain(e)));
      if (e.code === "run_not_found") return false;
    }
    return true;
  });
}

// --- start ----------------------------------------------------------------------------------

setupToken();
window.addEventListener("hashchange", render);
checkHealth();
setInterval(checkHealth, HEALTH_POLL_MS);
render();
