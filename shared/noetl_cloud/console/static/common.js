// What every page of the console shares: DOM helpers, the API call, the error banner, formatting.

export const $ = (selector) => document.querySelector(selector);

export class ApiError extends Error {
  constructor(message, status = 0, error = null) {
    super(message);
    this.status = status; // the HTTP status, and the API's error ({code, message, details}) when it sent one
    this.code = error ? error.code : null;
    this.details = error ? error.details : null;
    this.apiMessage = error ? error.message : null;
  }
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

export function showError(message) {
  const box = $("#error");
  box.textContent = message;
  box.hidden = false;
}

export function clearError() {
  const box = $("#error");
  box.hidden = true;
  box.textContent = "";
}

export async function api(path, signal, body) {
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
    throw new ApiError(`${path.split("?")[0]} answered ${detail}`, response.status, error);
  }
  return answer;
}

export function failed(error) {
  if (error && error.name === "AbortError") return; // the page moved on
  showError(error instanceof ApiError ? error.message : `The console could not reach the API (${error})`);
}

export function statusBadge(status) {
  return el("span", { class: `status ${status}`, text: status });
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function shortTime(iso) {
  return iso ? new Date(iso).toISOString().replace("T", " ").replace("Z", "") : "–";
}
