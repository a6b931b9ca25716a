// Tools: the tools panel (which tools a chat may use, from GET /api/tools) and the approval
// prompt (Approve / Deny a risky tool call: agent_tool_approval → agent_tool_decision).
// app.js creates one of each and calls their hooks; everything else lives here.

import { api } from "./connection.js";

const PICKED = "agent-chat:tools"; // the names unticked in the panel, per browser
const BASE_TITLE = document.title;

function make(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value;
    else if (value !== false && value != null) node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children);
  return node;
}

function addStylesheet() {
  if (document.querySelector('link[href="static/tools.css"]')) return;
  document.head.append(make("link", { rel: "stylesheet", href: "static/tools.css" }));
}

/** The tools panel: a checkbox per tool; `selected()` is null while every tool is ticked. */
export class ToolsPanel {
  constructor({ token, container }) {
    addStylesheet();
    this.token = token;
    this.tools = [];
    this.unticked = new Set(JSON.parse(localStorage.getItem(PICKED) ?? "[]"));
    this.summary = make("summary", { text: "Tools" });
    this.list = make("ul", { class: "tools-list" });
    this.root = make("details", { id: "tools-panel", class: "tools-panel" }, this.summary, this.list);
    container.append(this.root);
    // MCP servers come and go: opening the panel shows what is offered now.
    this.root.addEventListener("toggle", () => { if (this.root.open) this.load(); });
  }

  async load() {
    try {
      const body = await api("api/tools", this.token);
      this.tools = body.tools ?? [];
    } catch {
      this.tools = [];
    }
    this.render();
  }

  render() {
    this.list.replaceChildren(
      ...this.tools.map((tool) => {
        const box = make("input", { type: "checkbox", "data-tool": tool.name });
        box.checked = !this.unticked.has(tool.name);
        box.addEventListener("change", () => {
          if (box.checked) this.unticked.delete(tool.name);
          else this.unticked.add(tool.name);
          localStorage.setItem(PICKED, JSON.stringify([...this.unticked]));
          this.renderSummary();
        });
        const badges = [make("span", { class: "tool-source", text: tool.source })];
        if (tool.needs_approval) {
          badges.push(make("span", { class: "tool-approval", text: "asks first" }));
        }
        const label = make("label", { title: tool.description }, box,
          make("span", { class: "tool-name", text: tool.name }), ...badges);
        return make("li", {}, label);
      }),
    );
    if (!this.tools.length) this.list.append(make("li", { class: "tools-empty", text: "No tools" }));
    this.renderSummary();
  }

  renderSummary() {
    const on = this.tools.filter((t) => !this.unticked.has(t.name)).length;
    this.summary.textContent = `Tools (${on}/${this.tools.length})`;
  }

  /** The names to send as chat.tools, or null to leave the default (every tool). */
  selected() {
    const names = this.tools.map((t) => t.name);
    if (!names.some((n) => this.unticked.has(n))) return null;
    return names.filter((n) => !this.unticked.has(n));
  }
}

/** The approval banner: the pending call, Approve / Deny (with an optional reason). */
export class ApprovalPrompt {
  constructor({ before, send, announce }) {
    addStylesheet();
    this.send = send;
    this.announce = announce;
    this.pending = null;
    this.timers = [];
    this.call = make("p", { id: "approve-call", class: "approve-call" });
    this.args = make("pre", { id: "approve-args", class: "approve-args" });
    this.reason = make("input", { id: "approve-reason", type: "text", maxlength: "2000",
      placeholder: "Reason (optional, sent with Deny)", "aria-label": "Reason for denying" });
    this.approveButton = make("button", { id: "approve-yes", type: "button", text: "Approve" });
    this.denyButton = make("button", { id: "approve-no", type: "button", text: "Deny" });
    this.expiry = make("p", { class: "ask-expiry" });
    this.root = make("section", { id: "approve", class: "ask approve", hidden: true,
      "aria-labelledby": "approve-label", tabindex: "-1" },
      make("h2", { id: "approve-label", class: "ask-label", text: "Approve this tool call?" }),
      this.call, this.args,
      make("div", { class: "approve-buttons" }, this.reason, this.approveButton, this.denyButton),
      this.expiry);
    before.before(this.root);
    this.approveButton.addEventListener("click", () => this.decide(true));
    this.denyButton.addEventListener("click", () => this.decide(false));
  }

  /** The `session` frame: show its pending approval, if any. */
  sync(pending) {
    if (pending) this.show(pending);
    else this.hide();
  }

  /** A live frame: a new approval shows; anything else of the run means it was decided. */
  follow(frame) {
    const kind = frame.update_type ?? frame.type;
    if (kind === "agent_tool_approval") this.show(frame);
    else if (this.pending && kind !== "agent_tool_approval_timeout") this.hide();
    else if (kind === "agent_tool_approval_timeout") this.hide();
  }

  onError(frame) {
    if (["not_awaiting_approval", "unknown_tool_call", "already_decided"].includes(frame.code)) {
      this.hide();
    }
  }

  show(pending) {
    this.pending = pending;
    this.call.textContent = pending.tool_name;
    this.args.textContent = JSON.stringify(pending.arguments ?? {}, null, 2);
    this.reason.value = "";
    this.root.hidden = false;
    document.body.classList.add("awaiting");
    // Never onto Approve: a space or Enter typed for something else would run the call.
    // Someone typing keeps their place; otherwise the banner itself takes the focus, and
    // Tab reaches its buttons.
    if (!isTyping(document.activeElement)) this.root.focus();
    this.announce(`The agent wants to run ${pending.tool_name}: approve or deny.`);
    this.stopTimers();
    let on = false;
    const flash = () => {
      on = !on;
      document.title = on ? `❓ Approval needed — ${BASE_TITLE}` : BASE_TITLE;
    };
    const showExpiry = () => {
      const left = Math.max(0, Math.round((pending.expires_at - Date.now()) / 1000));
      this.expiry.textContent =
        `Decide within ${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`;
    };
    flash();
    showExpiry();
    this.timers = [setInterval(flash, 1000), setInterval(showExpiry, 1000)];
  }

  hide() {
    if (!this.pending && this.root.hidden) return;
    this.pending = null;
    this.root.hidden = true;
    document.body.classList.remove("awaiting");
    this.stopTimers();
    document.title = BASE_TITLE;
  }

  stopTimers() {
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
  }

  decide(approve) {
    const pending = this.pending;
    if (!pending) return;
    const frame = { type: "agent_tool_decision", tool_call_id: pending.tool_call_id, approve };
    const reason = this.reason.value.trim();
    if (!approve && reason) frame.reason = reason;
    if (this.send(frame)) this.hide();
  }
}

function isTyping(element) {
  return element instanceof HTMLTextAreaElement || element instanceof HTMLInputElement ||
    Boolean(element?.isContentEditable);
}
