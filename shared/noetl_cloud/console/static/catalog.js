// The catalog: playbooks and subscriptions (the latest version of each path), one path's versions and
// YAML, and the editor: the YAML in a textarea, registered as a new version (POST /api/catalog). The
// validator's problems (field path, problem, type: the message names the canonical form) are shown in a
// table next to the editor, not in the error banner: they are the answer the editor asks for.

import { $, ApiError, api, clearError, el, failed, shortTime } from "./common.js";

function catalogQuery() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  return { path: params.get("path"), version: params.get("version") };
}

function entryRow(item, selected) {
  const href = `#/catalog?${new URLSearchParams({ path: item.path })}`;
  return el(
    "tr",
    { "data-path": item.path, "data-kind": item.kind, class: item.path === selected ? "selected" : "" },
    el("td", {}, el("a", { href, text: item.path })),
    el("td", { text: item.kind }),
    el("td", { class: "version", text: String(item.version) }),
    el("td", { class: "mono", text: shortTime(item.created_at) }),
  );
}

function problemRow(problem) {
  return el(
    "tr",
    { "data-field": problem.field || "" },
    el("td", { class: "mono", text: problem.field || "–" }),
    el("td", { text: problem.problem || "" }),
    el("td", { class: "mono", text: problem.type || "" }),
  );
}

export function showCatalog() {
  const controller = new AbortController();
  const signal = controller.signal;
  const { path, version } = catalogQuery();
  const problems = $("#catalog-problems");
  const result = $("#catalog-result");

  function showProblems(list, message) {
    $("#catalog-problems tbody").replaceChildren(...list.map(problemRow));
    $("#catalog-problems-title").textContent = message || "";
    problems.hidden = list.length === 0 && !message;
  }

  async function loadList() {
    const answer = await api("/api/catalog", signal);
    clearError();
    $("#catalog tbody").replaceChildren(...answer.items.map((item) => entryRow(item, path)));
    $("#catalog").dataset.loaded = "true";
    return answer.items;
  }

  async function loadEntry(items, wanted) {
    const latest = items.find((item) => item.path === path);
    const suffix = wanted ? `?version=${encodeURIComponent(wanted)}` : "";
    const entry = await api(`/api/catalog/${path.split("/").map(encodeURIComponent).join("/")}${suffix}`, signal);
    const select = $("#catalog-version");
    const versions = [];
    for (let v = latest ? latest.version : entry.version; v >= 1; v -= 1) versions.push(v);
    select.replaceChildren(...versions.map((v) => el("option", { value: String(v), text: `version ${v}` })));
    select.value = String(entry.version);
    select.onchange = () => {
      location.hash = `#/catalog?${new URLSearchParams({ path, version: select.value })}`;
    };
    $("#catalog-path").textContent = entry.path;
    $("#catalog-kind").textContent = entry.kind;
    $("#catalog-sha").textContent = entry.content_sha256.slice(0, 16);
    $("#catalog-yaml").value = entry.content;
    $("#catalog-entry").dataset.version = String(entry.version);
    $("#catalog-executions").href = `#/?${new URLSearchParams({ path: entry.path })}`;
    $("#catalog-executions").hidden = entry.kind !== "Playbook";
  }

  async function register() {
    showProblems([]);
    result.textContent = "";
    delete result.dataset.version;
    try {
      const entry = await api("/api/catalog", signal, { content: $("#catalog-yaml").value });
      const what = entry.created ? "registered" : "unchanged: the same document is";
      result.textContent = `${what} ${entry.path} version ${entry.version}`;
      result.dataset.version = String(entry.version);
      result.dataset.path = entry.path;
      const items = await loadList();
      if (entry.path === path) await loadEntry(items, String(entry.version));
    } catch (error) {
      if (!(error instanceof ApiError) || error.status < 400 || error.status >= 500) throw error;
      const list = Array.isArray(error.details) ? error.details : [];
      showProblems(list, `${error.code}: ${error.apiMessage || error.message}`);
    }
  }

  function startNew() {
    $("#catalog-entry").hidden = false;
    $("#catalog-path").textContent = "new document";
    $("#catalog-kind").textContent = "";
    $("#catalog-sha").textContent = "";
    $("#catalog-version").replaceChildren();
    $("#catalog-yaml").value = "";
    showProblems([]);
    result.textContent = "";
  }

  $("#catalog-entry").hidden = !path;
  $("#catalog-register").onclick = () => register().catch(failed);
  $("#catalog-new").onclick = startNew;
  showProblems([]);
  result.textContent = "";
  loadList()
    .then((items) => (path ? loadEntry(items, version) : null))
    .catch(failed);
  return { stop: () => controller.abort() };
}
