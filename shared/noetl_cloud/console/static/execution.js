// One execution: its summary, its steps as a waterfall, and its events in a timeline that follows it
// through the events API's long poll until it ends.

import { $, api, clearError, duration, el, failed, shortTime } from "./common.js";
import { payloadRefs, previewBlock } from "./previews.js";
import { timeTravel } from "./timetravel.js";

const FOLLOW_WAIT_S = 20;
const STEP_ENDS = { "step.done": "ok", "step.failed": "error", "step.denied": "error", "loop.done": "ok" };
const COMMAND_ENDS = { "command.completed": "ok", "command.failed": "error" };
const MAX_PREVIEW = 4000;
const ENDED = ["completed", "failed", "cancelled"];

function summaryItems(detail) {
  const items = [
    ["Playbook", `${detail.path}${detail.version === null ? "" : "@" + detail.version}`],
    ["Pool", detail.execution_pool],
    ["Started", shortTime(detail.created_at)],
    ["Ended", shortTime(detail.ended_at)],
    ["Events", String(detail.event_count)],
  ];
  if (detail.meta && detail.meta.subscription_path) items.push(["Subscription", detail.meta.subscription_path]);
  if (detail.trace && detail.trace.traceparent) items.push(["Trace", detail.trace.traceparent.split("-")[1] || ""]);
  return items;
}

function renderDetail(detail) {
  $("#execution-id").textContent = detail.execution_id;
  const status = $("#execution-status");
  status.textContent = detail.status;
  status.className = `status ${detail.status}`;
  const summary = $("#execution-summary");
  summary.replaceChildren();
  if (detail.parent_execution_id) {
    summary.append(el("dt", { text: "Parent" }));
    summary.append(el("dd", {}, el("a", { href: `#/executions/${detail.parent_execution_id}`, text: detail.parent_execution_id })));
  }
  if (detail.meta && detail.meta.rerun_of) {
    summary.append(el("dt", { text: "Re-run of" }));
    summary.append(el("dd", {}, el("a", { href: `#/executions/${detail.meta.rerun_of}`, text: detail.meta.rerun_of })));
  }
  for (const [label, value] of summaryItems(detail)) {
    // The trace id links to the trace: Cloud Trace, or the local exporter's spans (docs/observability.md).
    const shown = label === "Trace" && /^[0-9a-f]{32}$/.test(value)
      ? el("a", { href: `/api/traces/${value}`, text: value, target: "_blank", rel: "noopener", id: "execution-trace" })
      : value;
    summary.append(el("dt", { text: label }), typeof shown === "string" ? el("dd", { text: shown }) : el("dd", {}, shown));
  }
  $("#rerun").hidden = !ENDED.includes(detail.status);
  const failure = $("#execution-error");
  failure.hidden = !detail.error;
  failure.textContent = detail.error ? JSON.stringify(detail.error, null, 2) : "";
}

function eventDetail(event) {
  const p = event.payload || {};
  const parts = [];
  for (const key of ["iteration", "attempt", "status", "kind", "worker_id", "to"]) {
    if (p[key] !== undefined && p[key] !== null) parts.push(`${key}=${p[key]}`);
  }
  if (p.error && p.error.message) parts.push(`error: ${p.error.message}`);
  if (event.payload_ref) parts.push(`payload ${event.payload_ref.uri || JSON.stringify(event.payload_ref)}`);
  return parts.join("  ");
}

function preview(event) {
  const text = JSON.stringify({ payload: event.payload, payload_ref: event.payload_ref, meta: event.meta }, null, 2);
  return text.length > MAX_PREVIEW ? `${text.slice(0, MAX_PREVIEW)}\n… (${text.length} characters)` : text;
}

function timelineRow(event, origin) {
  const offset = Math.round(new Date(event.event_time).getTime() - origin);
  const refs = payloadRefs(event);
  const row = el(
    "tr",
    { class: "event", "data-event-type": event.event_type, "data-event-id": event.event_id, "data-payload-refs": String(refs.length) },
    el("td", { class: "mono", text: String(offset) }),
    el("td", { class: "mono", text: event.event_type }),
    el("td", { text: (event.payload && event.payload.step) || "" }),
    el("td", { text: eventDetail(event) }),
    el("td", { class: "mono", text: String(event.position) }),
  );
  row.onclick = () => {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("payload")) {
      next.remove();
      return;
    }
    const cell = el("td", { colspan: "5" }, el("pre", { text: preview(event) }));
    for (const ref of refs) cell.append(previewBlock(event.execution_id, ref, failed));
    row.after(el("tr", { class: "payload" }, cell));
  };
  return row;
}

// Spans of the waterfall: a step run from step.started to its end, a command from command.issued to
// command.completed / command.failed (its attempts and iterations each a row).
function spans(events) {
  const open = new Map();
  const rows = [];
  for (const event of events) {
    const p = event.payload || {};
    const at = new Date(event.event_time).getTime();
    if (event.event_type === "step.started" && p.step_run_id) {
      const span = { key: `s${p.step_run_id}`, label: p.step, start: at, end: null, outcome: "open", depth: 0 };
      open.set(span.key, span);
      rows.push(span);
    } else if (event.event_type === "command.issued" && p.command_id) {
      const what = p.iteration !== undefined && p.iteration !== null ? ` [${p.iteration}]` : "";
      const label = `${p.step}${what} attempt ${p.attempt}`;
      const span = { key: `c${p.command_id}`, label, start: at, end: null, outcome: "open", depth: 1 };
      open.set(span.key, span);
      rows.push(span);
    } else if (STEP_ENDS[event.event_type] && p.step_run_id && open.has(`s${p.step_run_id}`)) {
      const span = open.get(`s${p.step_run_id}`);
      Object.assign(span, { end: at, outcome: STEP_ENDS[event.event_type] });
    } else if (COMMAND_ENDS[event.event_type] && p.command_id && open.has(`c${p.command_id}`)) {
      const span = open.get(`c${p.command_id}`);
      Object.assign(span, { end: at, outcome: COMMAND_ENDS[event.event_type] });
    }
  }
  return rows;
}

function renderWaterfall(events) {
  const box = $("#waterfall");
  box.replaceChildren();
  if (!events.length) return;
  const rows = spans(events);
  const origin = new Date(events[0].event_time).getTime();
  const last = new Date(events[events.length - 1].event_time).getTime();
  const total = Math.max(last - origin, 1);
  for (const span of rows) {
    const end = span.end === null ? last : span.end;
    const bar = el("div", { class: `bar ${span.outcome}` });
    bar.style.left = `${((span.start - origin) / total) * 100}%`;
    bar.style.width = `${Math.max(((end - span.start) / total) * 100, 0.3)}%`;
    const label = el("div", { class: "mono", text: (span.depth ? "  ↳ " : "") + span.label });
    const took = span.end === null ? "running" : duration(Math.round(span.end - span.start));
    box.append(el("div", { class: "row", "data-span": span.label }, label, el("div", { class: "track" }, bar), el("div", { text: took })));
  }
}

export function showExecution(id) {
  const controller = new AbortController();
  const events = [];
  const body = $("#timeline tbody");
  body.replaceChildren();
  $("#waterfall").replaceChildren();
  $("#execution-summary").replaceChildren();
  $("#execution-id").textContent = id;
  const followState = $("#follow-state");
  let stopped = false;
  $("#replay-summary").replaceChildren();
  $("#replay-commands tbody").replaceChildren();
  $("#verify-result").textContent = "";
  const travel = timeTravel(id, events, controller.signal);

  function append(answer) {
    const origin = events.length ? new Date(events[0].event_time).getTime() : null;
    for (const event of answer.events) {
      events.push(event);
      body.append(timelineRow(event, origin === null ? new Date(events[0].event_time).getTime() : origin));
    }
    renderWaterfall(events);
    travel.grew(answer);
  }

  async function run() {
    renderDetail(await api(`/api/executions/${id}`, controller.signal));
    let answer = await api(`/api/executions/${id}/events`, controller.signal);
    clearError();
    append(answer);
    // Follow mode: long polls until the execution ended and nothing more is to come.
    while (!stopped && !(answer.ended && !answer.more)) {
      followState.textContent = "following…";
      const params = new URLSearchParams({ wait: String(FOLLOW_WAIT_S) });
      if (answer.next_after) params.set("after", answer.next_after);
      answer = await api(`/api/executions/${id}/events?${params}`, controller.signal);
      append(answer);
    }
    followState.textContent = "";
    renderDetail(await api(`/api/executions/${id}`, controller.signal));
    await travel.show();
    $("#timeline").dataset.ended = "true";
  }

  $("#rerun").hidden = true;
  $("#rerun").onclick = async () => {
    try {
      const started = await api(`/api/executions/${id}/rerun`, controller.signal, {});
      location.hash = `#/executions/${started.execution_id}`;
    } catch (error) {
      failed(error);
    }
  };
  run().catch(failed);
  return {
    stop() {
      stopped = true;
      controller.abort();
    },
  };
}
