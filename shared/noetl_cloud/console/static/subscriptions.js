// Subscriptions: lifecycle state and the actions it allows.

import { $, api, clearError, el, failed, shortTime, statusBadge } from "./common.js";

const LIFECYCLE = { active: ["pause", "drain"], paused: ["resume", "drain"], registered: ["activate"] };

export function showSubscriptions() {
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
