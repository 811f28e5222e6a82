// Time travel: the replay API's state at a cutoff chosen on a slider over the events, and parity.

import { $, api, el, failed, statusBadge } from "./common.js";

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

export function timeTravel(id, events, signal) {
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
