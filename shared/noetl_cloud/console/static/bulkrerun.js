// The executions list's bulk re-run: every ended execution the applied filters match (status failed when
// none is chosen), re-run as one operation on the control plane (POST /api/executions/reruns), its
// progress polled every 500 ms until it is done or failed, each new execution linked from the results.

import { $, api, el, failed } from "./common.js";

const POLL_MS = 500;
// An operation with no progress for longer than the API's resume threshold (2 min) lost its process (a
// throttled or stopped instance): the same request again, with the same key, resumes it on the API.
const RESUME_AFTER_MS = 130000;

function newKey() {
  // One key per click: a retried request finds the operation it started (getRandomValues works off https too).
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function progress(op) {
  return (
    `operation ${op.operation_id.slice(0, 12)}: ${op.state} · re-ran ${op.done} of ${op.matched}` +
    ` · started ${op.started} · duplicates ${op.duplicates} · failed ${op.failed}`
  );
}

function resultItem(result) {
  const item = el("li", { "data-rerun-of": result.rerun_of, "data-status": result.status });
  item.append(el("a", { href: `#/executions/${result.rerun_of}`, text: result.rerun_of }), " → ");
  if (result.execution_id) {
    item.append(el("a", { href: `#/executions/${result.execution_id}`, class: "new", text: result.execution_id }));
  } else {
    item.append(el("span", { class: "status failed", text: result.code || result.status }));
  }
  return item;
}

export function bulkRerun(filters, signal) {
  const button = $("#rerun-matching");
  const out = $("#rerun-progress");
  const list = $("#rerun-results");
  let polling = null;
  const statuses = (filters.status || "failed").split(",");
  button.hidden = statuses.includes("started");
  button.textContent = `Re-run ${statuses.join(", ")} matching`;
  out.textContent = "";
  delete out.dataset.state;
  list.replaceChildren();

  function show(op) {
    out.textContent = progress(op);
    out.dataset.state = op.state;
    out.dataset.operationId = op.operation_id;
    list.replaceChildren(...op.results.map(resultItem));
  }

  async function start() {
    const body = { filter: { ...filters, status: statuses.join(",") }, idempotency_key: newKey() };
    const shown = Object.entries(body.filter).map(([k, v]) => `${k}=${v}`).join(", ");
    if (!window.confirm(`Re-run every execution with ${shown}?`)) return;
    let op = await api("/api/executions/reruns", signal, body);
    show(op);
    clearInterval(polling);
    if (op.state !== "running") return;
    let progressed = { done: op.done, at: Date.now() };
    polling = setInterval(async () => {
      try {
        op = await api(`/api/executions/reruns/${op.operation_id}`, signal);
        show(op);
        if (op.state !== "running") clearInterval(polling);
        else if (op.done !== progressed.done) progressed = { done: op.done, at: Date.now() };
        else if (Date.now() - progressed.at > RESUME_AFTER_MS) {
          progressed = { done: op.done, at: Date.now() };
          show(await api("/api/executions/reruns", signal, body)); // the same key: resumed, never started twice
        }
      } catch (error) {
        clearInterval(polling);
        failed(error);
      }
    }, POLL_MS);
  }

  button.onclick = () => start().catch(failed);
  return { stop: () => clearInterval(polling) };
}
