// The executions list: the API's filters in the URL's hash, live updates, cursor paging.

import { bulkRerun } from "./bulkrerun.js";
import { $, api, clearError, duration, el, failed, shortTime, statusBadge } from "./common.js";

export const FILTERS = ["status", "path", "version", "subscription", "pool", "parent", "since", "until"];
const LIST_REFRESH_MS = 3000;

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

export function showList() {
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
  const bulk = bulkRerun(filters, controller.signal);
  load(false).catch(failed).finally(schedule);
  return {
    stop() {
      bulk.stop();
      clearTimeout(timer);
      controller.abort();
      controller = new AbortController();
    },
  };
}

export function applyFilters(event) {
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
