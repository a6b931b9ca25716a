// A tool call as a collapsible card: name, argument preview and elapsed time in its header;
// arguments, then the result (bounded when long, with "Show more", Copy, and how much of it
// the model saw) or the error inside.

import { copyButton } from "./code.js";
import { button, el } from "./dom.js";

const PREVIEW_CHARS = 60;
const LONG_CHARS = 1200;
const LONG_LINES = 16;

/** Text for a JSON value: strings as they are, objects indented with real line breaks. */
export function display(value) {
  if (typeof value === "string") return value;
  const json = JSON.stringify(value, null, 2) ?? String(value);
  return json.replace(/(?<!\\)((?:\\\\)*)\\n/g, "$1\n"); // "\n" inside strings: a new line
}

/** `timezone: "UTC", limit: 3`, cut to a short line. */
export function argumentPreview(args) {
  let text;
  if (args && typeof args === "object" && !Array.isArray(args)) {
    text = Object.entries(args).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(", ");
  } else {
    text = JSON.stringify(args ?? "");
  }
  text = text.replace(/\s+/g, " ");
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS - 1)}…` : text;
}

// A denied call ends in a tool_error that says so: the user's choice, not a failure.
const DECLINED = "The user declined";

const seconds = (ms) => (ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`);

export class ToolCard {
  constructor(parent, f) {
    this.card = parent.appendChild(el("details", "tool running"));
    this.card.dataset.toolCallId = f.tool_call_id;
    const summary = this.card.appendChild(el("summary"));
    summary.append(el("span", "tool-icon", "⚙"), el("span", "tool-name", f.tool_name));
    const preview = argumentPreview(f.arguments ?? {});
    if (preview && preview !== "{}") summary.append(el("span", "tool-args", preview));
    this.status = summary.appendChild(el("span", "tool-status", "running…"));
    this.body = this.card.appendChild(el("div", "tool-body"));
    this.section("Arguments", display(f.arguments ?? {}));
    this.started = typeof f.ts === "number" ? f.ts : Date.now();
    this.ticker = setInterval(() => this.tick(), 1000);
    this.seen = null;
  }

  tick() {
    if (!this.card.isConnected) return clearInterval(this.ticker); // its chat was closed
    const elapsed = Math.max(0, Date.now() - this.started);
    this.status.textContent = `running ${Math.round(elapsed / 1000)} s…`;
  }

  /** Not running: the call waits for the user's approval (`resume` when it goes on). */
  awaitApproval() {
    clearInterval(this.ticker);
    this.waiting = true;
    this.status.textContent = "waiting for your approval";
  }

  /** Approved: it runs from `ts` on. */
  resume(ts) {
    if (!this.waiting) return;
    this.waiting = false;
    this.started = typeof ts === "number" ? ts : Date.now();
    this.status.textContent = "running…";
    this.ticker = setInterval(() => this.tick(), 1000);
  }

  section(title, text, className = "") {
    const pre = el("pre", className, text);
    this.body.append(el("h4", null, title), pre);
    return pre;
  }

  complete(result, ms) {
    clearInterval(this.ticker);
    this.waiting = false;
    this.card.className = "tool ok";
    this.status.textContent = `✓ ${ms == null ? "done" : seconds(ms)}`;
    const text = display(result);
    const pre = this.section("Result", text, "result");
    const long = text.length > LONG_CHARS || text.split("\n").length > LONG_LINES;
    const bar = el("div", "tool-result-bar");
    if (long) {
      pre.classList.add("clamped");
      const toggle = button("more", "Show more", () => {
        const clamped = pre.classList.toggle("clamped");
        toggle.textContent = clamped ? "Show more" : "Show less";
        toggle.setAttribute("aria-expanded", String(!clamped));
      });
      toggle.setAttribute("aria-expanded", "false");
      bar.append(toggle);
      const modelText = typeof result === "string" ? result : JSON.stringify(result);
      this.seen = el("span", "tool-seen",
        `The model saw all of it (${modelText.length.toLocaleString()} characters).`);
      bar.append(this.seen);
    }
    bar.append(copyButton(() => text, "Copy result"));
    this.body.append(bar);
  }

  /** The context budget cut this result before the model saw it. */
  cut(keptTokens, tokens) {
    const text = `The model saw about ${keptTokens.toLocaleString()} of its ` +
      `${tokens.toLocaleString()} tokens; it can ask for the rest.`;
    if (this.seen) this.seen.textContent = text;
    else this.body.append(el("p", "tool-seen", text));
  }

  fail(error) {
    clearInterval(this.ticker);
    this.waiting = false;
    const text = String(error);
    if (text.startsWith(DECLINED)) {
      this.card.className = "tool declined"; // not run, as the user asked: no error to fix
      this.status.textContent = "declined by you";
      this.section("Not run", text);
      return;
    }
    this.card.className = "tool failed";
    this.card.open = true;
    this.status.textContent = "✗ error";
    this.section("Error", text, "error");
  }
}
