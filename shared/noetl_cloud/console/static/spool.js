// Spool: each subscription's lanes (items, bytes, oldest item's age), its circuit and dead letters;
// "drain now"; the dead letters of one subscription with "resend" per item and "resend all matching"
// (one operation on the drainer, its progress polled). The control plane forwards /api/spool/* to the
// spool drainer, which holds the spool (docs/console.md).

import { $, api, clearError, el, failed, shortTime, statusBadge } from "./common.js";

const REFRESH_MS = 3000;

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

function selected() {
  const query = (location.hash.split("?")[1] || "");
  return new URLSearchParams(query).get("subscription");
}

export function showSpool() {
  const controller = new AbortController();
  const signal = controller.signal;
  const current = selected();
  const form = $("#dead-letter-filters");
  let timer = null;
  let polling = null;

  function lanes(item) {
    if (!item.lanes.length) return el("span", { class: "muted", text: "empty" });
    const list = el("ul", { class: "lanes" });
    for (const lane of item.lanes) {
      const more = lane.capped ? "+" : "";
      list.append(
        el("li", { "data-lane": lane.lane, text: `${lane.lane}: ${lane.items}${more} item(s), ${bytes(lane.bytes)}, oldest ${age(lane.oldest_age_s)}` }),
      );
    }
    return list;
  }

  function row(item) {
    const circuit = item.circuit ? statusBadge(item.circuit.state) : el("span", { class: "muted", text: "not registered" });
    if (item.circuit && item.circuit.consecutive_failures) circuit.title = `${item.circuit.consecutive_failures} failure(s) in a row`;
    const drain = el("button", { type: "button", "data-action": "drain", text: "drain now" });
    drain.onclick = () => drainNow(item.subscription).catch(failed);
    const open = el("a", { href: `#/spool?${new URLSearchParams({ subscription: item.subscription })}`, text: "dead letters" });
    const flags = [];
    if (item.backlog) flags.push("backlog draining");
    if (item.halted) flags.push(`halted (${item.halted.reason || "poison"})`);
    return el(
      "tr",
      { "data-subscription": item.subscription, class: item.subscription === current ? "selected" : "" },
      el("td", { text: item.subscription }),
      el("td", {}, circuit),
      el("td", { "data-field": "items", text: String(item.items) }),
      el("td", { text: bytes(item.bytes) }),
      el("td", {}, lanes(item)),
      el("td", { "data-field": "dead-letters", text: String(item.dead_letters.items) }),
      el("td", { class: "muted", text: flags.join(", ") || "–" }),
      el("td", { class: "actions" }, drain, open),
    );
  }

  async function loadOverview() {
    const answer = await api("/api/spool/subscriptions", signal);
    $("#spool-subscriptions tbody").replaceChildren(...answer.items.map(row));
    $("#spool-empty").hidden = answer.items.length > 0;
  }

  function filters() {
    const data = new FormData(form);
    const query = { subscription: current };
    for (const name of ["lane", "reason"]) {
      const value = String(data.get(name) || "").trim();
      if (value) query[name] = value;
    }
    return query;
  }

  function deadRow(item) {
    const resend = el("button", { type: "button", "data-action": "resend", text: "resend" });
    resend.onclick = () => {
      resend.disabled = true;
      resendOne(item.name).catch((error) => {
        resend.disabled = false;
        failed(error);
      });
    };
    return el(
      "tr",
      { "data-name": item.name, "data-message-id": item.message_id },
      el("td", { text: item.lane }),
      el("td", { class: "mono", text: item.recv_seq }),
      el("td", { class: "mono", text: item.message_id }),
      el("td", { text: item.reason || "–" }),
      el("td", { text: String(item.attempts) }),
      el("td", { text: bytes(item.bytes) }),
      el("td", { class: "mono", text: shortTime(item.spooled_at) }),
      el("td", { text: item.playbook || "–" }),
      el("td", { class: "actions" }, resend),
    );
  }

  async function loadDeadLetters() {
    if (!current) return;
    const query = new URLSearchParams({ ...filters(), limit: "100" });
    const answer = await api(`/api/spool/dead-letters?${query}`, signal);
    $("#dead-letters tbody").replaceChildren(...answer.items.map(deadRow));
    $("#dead-letters-empty").hidden = answer.items.length > 0;
    $("#dead-letters-more").hidden = !answer.next;
  }

  async function refresh() {
    await loadOverview();
    await loadDeadLetters();
    clearError();
  }

  async function drainNow(subscription) {
    const answer = await api("/api/spool/drain", signal, { subscription });
    const states = answer.results.map((r) => `${r.state}${r.replayed ? `, ${r.replayed} replayed` : ""}`);
    $("#spool-result").textContent = `drain of ${subscription}: ${states.join("; ")}`;
    await refresh();
  }

  async function resendOne(name) {
    const answer = await api("/api/spool/dead-letters/resend", signal, { subscription: current, name });
    $("#spool-result").textContent = `resent ${answer.name} to its lane; drain ${answer.drain}`;
    await refresh();
  }

  function progress(op) {
    const matched = op.matched === null ? "…" : String(op.matched);
    const drained = op.drain ? ` · drain: ${op.drain.map((r) => r.state).join(", ")}` : "";
    return `operation ${op.operation_id.slice(0, 12)}: ${op.state} · resent ${op.resent} of ${matched} · failed ${op.failed}${drained}`;
  }

  async function resendAll(event) {
    event.preventDefault();
    const body = filters();
    const shown = Object.entries(body).filter(([k]) => k !== "subscription").map(([k, v]) => `${k}=${v}`).join(", ");
    if (!window.confirm(`Resend every dead letter of ${current}${shown ? ` with ${shown}` : ""}?`)) return;
    const out = $("#resend-progress");
    let op = await api("/api/spool/resends", signal, body);
    out.textContent = progress(op);
    out.dataset.state = op.state;
    clearInterval(polling);
    polling = setInterval(async () => {
      try {
        op = await api(`/api/spool/resends/${op.operation_id}`, signal);
        out.textContent = progress(op);
        out.dataset.state = op.state;
        if (op.state === "done" || op.state === "failed") {
          clearInterval(polling);
          await refresh();
        }
      } catch (error) {
        clearInterval(polling);
        failed(error);
      }
    }, 500);
  }

  $("#dead-letters-panel").hidden = !current;
  $("#dead-letters-subscription").textContent = current || "";
  $("#spool-result").textContent = "";
  $("#resend-progress").textContent = "";
  form.onsubmit = resendAll;
  $("#dead-letters-filter").onclick = () => loadDeadLetters().catch(failed);

  refresh().catch(failed);
  timer = setInterval(() => refresh().catch(failed), REFRESH_MS);
  return {
    stop: () => {
      clearInterval(timer);
      clearInterval(polling);
      controller.abort();
    },
  };
}
