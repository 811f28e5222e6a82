// The NoETL Cloud console: its routes. The pages are ES modules beside this one (executions.js,
// execution.js with timetravel.js and previews.js, catalog.js, subscriptions.js, spool.js, over common.js), loaded by the browser as they are:
// no framework, no build step. Every value reaches the page through textContent, never as markup.
// Routes live in the URL's hash: #/?status=failed&path=... (the list with its filters),
// #/executions/<id> (one execution), #/catalog[?path=...&version=...], #/subscriptions and
// #/spool[?subscription=...].

import { showCatalog } from "./catalog.js";
import { $, clearError } from "./common.js";
import { showExecution } from "./execution.js";
import { applyFilters, showList } from "./executions.js";
import { showSpool } from "./spool.js";
import { showSubscriptions } from "./subscriptions.js";

let view = null; // what the current route shows: {stop()} ends its timers and long polls

function route() {
  if (view) view.stop();
  clearError();
  const hash = location.hash || "#/";
  const match = hash.match(/^#\/executions\/(\d{1,19})$/);
  const subscriptions = hash === "#/subscriptions";
  const spool = hash === "#/spool" || hash.startsWith("#/spool?");
  const catalog = hash === "#/catalog" || hash.startsWith("#/catalog?");
  $("#executions-view").hidden = Boolean(match) || subscriptions || spool || catalog;
  $("#catalog-view").hidden = !catalog;
  $("#execution-view").hidden = !match;
  $("#subscriptions-view").hidden = !subscriptions;
  $("#spool-view").hidden = !spool;
  if (match) view = showExecution(match[1]);
  else if (subscriptions) view = showSubscriptions();
  else if (spool) view = showSpool();
  else if (catalog) view = showCatalog();
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
