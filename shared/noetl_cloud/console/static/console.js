// The NoETL Cloud console: the executions list and an execution's page, over the control plane's
// executions API (docs/api.md). No framework and no build step; every value reaches the page through
// textContent, never as markup. Routes live in the URL's hash: #/?status=failed&path=... (the list
// with its filters) and #/executions/<id> (one execution).
"use strict";

(() => {
  const FILTERS = ["status", "path", "version", "subscription", "pool", "parent", "since", "until"];
  const LIST_REFRESH_MS = 3000;
  const FOLLOW_WAIT_S = 20;
  const STEP_ENDS = { "step.done": "ok", "step.failed": "error", "step.denied": "error", "loop.done": "ok" };
  const COMMAND_ENDS = { "command.completed": "ok", "command.failed": "error" };
  const MAX_PREVIEW = 4000;

  const $ = (selector) => document.querySelector(selector);
  let view = null; // what the current route shows: {stop()} ends its timers and long polls

  class ApiError extends Error {}

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function showError(message) {
    const box = $("#error");
    box.textContent = message;
    box.hidden = false;
  }

  function clearError() {
    const box = $("#error");
    box.hidden = true;
    box.textContent = "";
  }

  async function api(path, signal, body) {
    const init = { headers: { Accept: "application/json" }, credentials: "same-origin", signal };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let answer = null;
    try {
      answer = await response.json();
    } catch (_) {
      answer = null;
    }
    if (!response.ok) {
      const error = answer && answer.error;
      const detail = error ? `${error.code}: ${error.message}` : `HTTP ${response.status}`;
      throw new ApiError(`${path.split("?")[0]} answered ${detail}`);
    }
    return answer;
  }

  function failed(error) {
    if (error && error.name === "AbortError") return; // the page moved on
    showError(error instanceof ApiError ? error.message : `The console could not reach the API (${error})`);
  }

  function statusBadge(status) {
    return el("span", { class: `status ${status}`, text: status });
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  function shortTime(iso) {
    return iso ? new Date(iso).toISOString().replace("T", " ").replace("Z", "") : "–";
  }

  // -- the executions list ---------------------------------------------------------------------

  function filtersFromHash() {
    const query = location.hash.split("?")[1] || "";
    const params = new URLSearchParams(query);
    const filters = {};
    for (const name of FILTERS) if (params.get(name)) filters[name] = params.get(name);
    return filters;
  }

  function executionRow(item) {
    const link = el("a", { href: `#/executions/${item.execution_id}`, class: "mono", text: item.execution_id });
    const version = item.version === null ? "" : `@${item.version}`;
    return el(
      "tr",
      { "data-execution-id": item.execution_id, "data-status": item.status },
      el("td", {}, link),
      el("td", {}, statusBadge(item.status)),
      el("td", { text: item.path + version }),
      el("td", { text: item.execution_pool }),
      el("td", { text: item.subscription || "–" }),
      el("td", { class: "mono", text: shortTime(item.created_at) }),
      el("td", { text: duration(item.duration_ms) }),
    );
  }

  function showList() {
    const filters = filtersFromHash();
    const form = $("#filters");
    for (const name of FILTERS) form.elements[name].value = filters[name] || "";
    const body = $("#executions tbody");
    let cursor = null;
    let pagesLoaded = 0;
    let timer = null;
    let controller = new AbortController();

    async function load(append) {
      const params = new URLSearchParams(filters);
      if (append && cursor) params.set("cursor", cursor);
      const page = await api(`/api/executions?${params}`, controller.signal);
      clearError();
      if (!append) body.replaceChildren();
      for (const item of page.items) body.append(executionRow(item));
      cursor = page.next_cursor;
      pagesLoaded = append ? pagesLoaded + 1 : 1;
      $("#more").hidden = !cursor;
      $("#executions-empty").hidden = body.children.length > 0;
      $("#executions").dataset.loaded = "true";
    }

    function schedule() {
      // Live updates: the first page again every few seconds, unless older pages were loaded.
      timer = setTimeout(async () => {
        if (form.elements.live.checked && pagesLoaded === 1) {
          try {
            await load(false);
          } catch (error) {
            failed(error);
          }
        }
        schedule();
      }, LIST_REFRESH_MS);
    }

    $("#more").onclick = () => load(true).catch(failed);
    load(false).catch(failed).finally(schedule);
    return {
      stop() {
        clearTimeout(timer);
        controller.abort();
        controller = new AbortController();
      },
    };
  }

  function applyFilters(event) {
    event.preventDefault();
    const form = $("#filters");
    const params = new URLSearchParams();
    for (const name of FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) params.set(name, value);
    }
    const query = params.toString();
    location.hash = query ? `#/?${query}` : "#/";
  }

  // -- one execution ---------------------------------------------------------------------------

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
    for (const [label, value] of summaryItems(detail)) {
      summary.append(el("dt", { text: label }), el("dd", { text: value }));
    }
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
    const row = el(
      "tr",
      { class: "event", "data-event-type": event.event_type, "data-event-id": event.event_id },
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
      row.after(el("tr", { class: "payload" }, el("td", { colspan: "5" }, el("pre", { text: preview(event) }))));
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

  // -- time travel: the replay API's state at a cutoff, and parity -----------------------------

  function replayQuery(scope, id) {
    return new URLSearchParams({ tenant_id: scope.tenant_id, organization_id: scope.organization_id, execution_id: id });
  }

  function renderReplay(state) {
    const execution = (state.state.execution || [])[0] || {};
    const summary = $("#replay-summary");
    summary.replaceChildren();
    const items = [
      ["Cutoff position", String(state.cutoff_position)],
      ["Events folded", String(state.event_count)],
      ["Status", execution.status || "–"],
      ["Steps started / ended", `${execution.steps_started ?? 0} / ${execution.steps_ended ?? 0}`],
      ["Checksum", (state.checksum || "").slice(0, 16)],
    ];
    for (const [label, value] of items) {
      summary.append(el("dt", { text: label }), el("dd", { text: value, "data-field": label }));
    }
    const body = $("#replay-commands tbody");
    body.replaceChildren();
    for (const command of state.state.commands || []) {
      body.append(
        el(
          "tr",
          { "data-command-status": command.status },
          el("td", { class: "mono", text: command.id }),
          el("td", { text: command.step || "" }),
          el("td", { text: command.iteration === null || command.iteration === undefined ? "" : String(command.iteration) }),
          el("td", { text: String(command.attempt ?? "") }),
          el("td", {}, statusBadge(command.status || "")),
        ),
      );
    }
    $("#time-travel").dataset.cutoff = String(state.cutoff_position);
  }

  function timeTravel(id, events, signal) {
    const slider = $("#cutoff");
    const label = $("#cutoff-label");
    let scope = null;
    let request = 0;

    function describe() {
      const event = events[Number(slider.value)];
      label.textContent = event ? `${Number(slider.value) + 1}/${events.length} ${event.event_type}` : "";
    }

    async function show() {
      const event = events[Number(slider.value)];
      if (!event || !scope) return;
      const mine = ++request;
      const params = replayQuery(scope, id);
      params.set("as_of_position", String(event.position));
      const state = await api(`/api/replay/state?${params}`, signal);
      if (mine === request) renderReplay(state);
    }

    slider.oninput = describe;
    slider.onchange = () => show().catch(failed);
    $("#verify").onclick = async () => {
      const result = $("#verify-result");
      result.textContent = "verifying…";
      result.className = "";
      try {
        const report = await api(`/api/replay/verify?${replayQuery(scope, id)}`, signal);
        const drift = (report.drift || []).join(", ");
        result.textContent = report.ok
          ? `parity ok: the live projection equals a fresh fold of ${report.replayed.event_count} events`
          : `drift in ${drift || "–"}; the projection is ${report.events_behind ?? "?"} events behind`;
        result.className = report.ok ? "parity-ok" : "parity-drift";
      } catch (error) {
        result.textContent = "";
        failed(error);
      }
    };

    return {
      grew(answer) {
        scope = scope || { tenant_id: answer.tenant_id, organization_id: answer.organization_id };
        const atEnd = Number(slider.value) >= Number(slider.max);
        slider.max = String(Math.max(events.length - 1, 0));
        slider.disabled = events.length === 0;
        $("#verify").disabled = events.length === 0;
        if (atEnd) slider.value = slider.max;
        describe();
      },
      show,
    };
  }

  function showExecution(id) {
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

    run().catch(failed);
    return {
      stop() {
        stopped = true;
        controller.abort();
      },
    };
  }

  // -- subscriptions: lifecycle state and actions ----------------------------------------------

  const LIFECYCLE = { active: ["pause", "drain"], paused: ["resume", "drain"], registered: ["activate"] };

  function showSubscriptions() {
    const controller = new AbortController();
    const body = $("#subscriptions tbody");

    async function act(item, action) {
      const path = `/api/subscriptions/${item.subscription_id}/${action}`;
      await api(path, controller.signal, { expected_version: item.version });
      await load();
    }

    function row(item) {
      const actions = el("td", { class: "actions" });
      for (const action of LIFECYCLE[item.state] || []) {
        const button = el("button", { type: "button", "data-action": action, text: action });
        button.onclick = () => {
          // Draining ends the subscription's intake for good (it ends deactivated): ask first.
          if (action === "drain" && !window.confirm(`Drain ${item.path}? It stops taking messages and ends deactivated.`)) return;
          act(item, action).catch(failed);
        };
        actions.append(button);
      }
      const executions = el("a", { href: `#/?${new URLSearchParams({ subscription: item.path })}`, text: "executions" });
      return el(
        "tr",
        { "data-subscription-path": item.path, "data-state": item.state },
        el("td", { text: item.path }),
        el("td", {}, statusBadge(item.state)),
        el("td", { text: String(item.version) }),
        el("td", { class: "mono", text: shortTime(item.updated_at) }),
        actions,
        el("td", {}, executions),
      );
    }

    async function load() {
      const answer = await api("/api/subscriptions", controller.signal);
      clearError();
      body.replaceChildren(...answer.items.map(row));
    }

    load().catch(failed);
    return { stop: () => controller.abort() };
  }

  // -- routing ---------------------------------------------------------------------------------

  function route() {
    if (view) view.stop();
    clearError();
    const hash = location.hash || "#/";
    const match = hash.match(/^#\/executions\/(\d{1,19})$/);
    const subscriptions = hash === "#/subscriptions";
    $("#executions-view").hidden = Boolean(match) || subscriptions;
    $("#execution-view").hidden = !match;
    $("#subscriptions-view").hidden = !subscriptions;
    if (match) view = showExecution(match[1]);
    else if (subscriptions) view = showSubscriptions();
    else view = showList();
  }

  window.addEventListener("hashchange", route);
  document.addEventListener("DOMContentLoaded", () => {
    $("#filters").addEventListener("submit", applyFilters);
    $("#clear-filters").onclick = () => {
      location.hash = "#/";
    };
    route();
  });
})();
