// Payload previews on an execution's page: the payload references an event carries (its payload_ref, or
// one inside its payload: a frame's output_ref, an offloaded result's reference) resolved through
// GET /api/executions/{id}/payloads/{sha256}: the first rows of an Arrow frame as a table, the first
// bytes of JSON or text, the size and first bytes of anything else.

import { api, el } from "./common.js";

const PREVIEW_ROWS = 20;

export function payloadRefs(event) {
  const found = new Map();
  const walk = (value, depth) => {
    if (!value || typeof value !== "object" || depth > 8) return;
    if (typeof value.sha256 === "string" && typeof value.uri === "string" && value.media_type) {
      found.set(value.sha256, value);
    }
    for (const child of Object.values(value)) walk(child, depth + 1);
  };
  walk(event.payload_ref, 0);
  walk(event.payload, 0);
  return [...found.values()];
}

function table(answer) {
  const head = el("tr", {}, ...answer.columns.map((name) => el("th", { text: name })));
  const rows = answer.rows.map((cells) => el("tr", {}, ...cells.map((cell) => el("td", { class: "mono", text: cell }))));
  return el("table", { class: "grid preview" }, el("thead", {}, head), el("tbody", {}, ...rows));
}

function describe(answer) {
  const size = answer.size_bytes === null ? "size unknown" : `${answer.size_bytes} bytes`;
  if (answer.kind === "table") return `${answer.media_type} · ${size} · first ${answer.rows.length} rows`;
  return `${answer.media_type} · ${size}${answer.truncated ? " · first bytes" : ""}`;
}

export function previewBlock(executionId, ref, onError) {
  const block = el("div", { class: "payload-preview", "data-sha256": ref.sha256 });
  const title = el("p", { class: "muted mono", text: `payload ${ref.sha256.slice(0, 16)} · loading…` });
  block.append(title);
  api(`/api/executions/${executionId}/payloads/${ref.sha256}?rows=${PREVIEW_ROWS}`)
    .then((answer) => {
      title.textContent = `payload ${ref.sha256.slice(0, 16)} · ${describe(answer)}`;
      block.dataset.kind = answer.kind;
      if (answer.kind === "table") block.append(table(answer));
      else if (answer.kind === "text") block.append(el("pre", { text: answer.text }));
      else block.append(el("pre", { text: answer.head_hex }));
    })
    .catch((error) => {
      title.textContent = `payload ${ref.sha256.slice(0, 16)} · no preview`;
      onError(error);
    });
  return block;
}
