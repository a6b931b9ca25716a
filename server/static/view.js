// The conversation view: turns PROTOCOL.md run events into DOM, one <article> per run.
// Model and tool text only ever reaches the page as text nodes or through renderMarkdown,
// which builds nodes too: nothing here parses HTML.

import { renderMarkdown } from "./markdown.js";

export const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
};

const STOP_REASONS = {
  user: "Stopped by you",
  input_timeout: "Stopped: the question was not answered in time",
  shutdown: "Stopped: the server was shutting down",
  interrupted: "Interrupted: the server restarted during this run",
};
const COMPLETION = {
  finished: (n) => `Finished in ${n} step${n === 1 ? "" : "s"}`,
  max_steps: (n) => `Step limit reached after ${n} step${n === 1 ? "" : "s"}`,
  budget: (n) => `Budget ran out after ${n} step${n === 1 ? "" : "s"}`,
};

const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

/** Render run events into `root`; user messages come from `expect()` or `setHistory()`. */
export class Conversation {
  constructor(root) {
    this.root = root;
    this.runs = new Map(); // run_id -> Run
    this.userTexts = new Map(); // run_id -> the user's message (from the messages API)
    this.answers = new Map(); // request_input tool_call_id -> the user's answer
    this.pending = null; // an article for a message sent but not yet started by the server
  }

  clear() {
    this.root.replaceChildren();
    this.runs.clear();
    this.userTexts.clear();
    this.answers.clear();
    this.pending = null;
  }

  /** Remember what the user wrote in past runs, so a replay can show it. */
  setHistory(messages) {
    for (const msg of messages) {
      if (msg.role === "user" && msg.run_id) this.userTexts.set(msg.run_id, msg.content);
      if (msg.role === "tool" && msg.tool_name === "request_input") {
        this.answers.set(msg.tool_call_id, msg.content);
      }
    }
  }

  /** Show a message the user just sent; the next new run adopts it. */
  expect(text) {
    this.pending = new Run(this.append(el("article", "run")), text);
    this.pending.setBusy(true);
    return this.pending;
  }

  /** The server refused the message just sent (e.g. run_in_progress). */
  rejectPending(message) {
    if (!this.pending) return false;
    this.pending.notice(message, "error");
    this.pending.setBusy(false);
    this.pending = null;
    return true;
  }

  notice(text, kind = "info") {
    this.append(el("p", `notice ${kind}`, text));
  }

  /** Record the answer to a question in the step that asked it. */
  noteAnswer(runId, step, text) {
    this.runs.get(runId)?.step(step).note(`You answered: ${text}`, "answer");
  }

  append(node) {
    const stick = this.atBottom();
    this.root.append(node);
    if (stick) this.scrollToEnd();
    return node;
  }

  atBottom() {
    const r = this.root;
    return r.scrollHeight - r.scrollTop - r.clientHeight < 120;
  }

  scrollToEnd() {
    this.root.scrollTop = this.root.scrollHeight;
  }

  /** Apply one server frame that carries a run_id. */
  apply(frame) {
    const stick = this.atBottom();
    this.run(frame.run_id).apply(frame, this.answers);
    if (stick) this.scrollToEnd();
  }

  run(runId) {
    let run = this.runs.get(runId);
    if (!run) {
      run = this.pending ?? new Run(this.append(el("article", "run")), this.userTexts.get(runId));
      this.pending = null;
      run.article.dataset.runId = runId;
      this.runs.set(runId, run);
    }
    return run;
  }
}

function contextNote(f) {
  const parts = [];
  if (f.compressed.length) parts.push(`shortened ${f.compressed.length} long result(s)`);
  if (f.dropped_messages) parts.push(`left out ${f.dropped_messages} older message(s)`);
  if (f.collapsed_steps) parts.push(`summarized ${f.collapsed_steps} earlier step(s)`);
  return `To fit the model's memory, the agent ${parts.join(", ")}.`;
}

class Run {
  constructor(article, userText) {
    this.article = article;
    this.steps = new Map();
    this.tools = new Map();
    this.chat = null;
    if (userText != null) article.append(el("div", "bubble user", userText));
    this.body = article.appendChild(el("div", "run-body"));
  }

  setBusy(busy) {
    this.article.classList.toggle("active", busy);
  }

  notice(text, kind = "info") {
    this.body.append(el("p", `notice ${kind}`, text));
  }

  step(n) {
    let step = this.steps.get(n);
    if (!step) {
      step = new Step(this.body, n);
      this.steps.set(n, step);
    }
    return step;
  }

  tool(frame) {
    let card = this.tools.get(frame.tool_call_id);
    if (!card) {
      card = new ToolCard(this.step(frame.step).tools, frame);
      this.tools.set(frame.tool_call_id, card);
    }
    return card;
  }

  apply(f, answers) {
    this.setBusy(true);
    switch (f.update_type ?? f.type) {
      case "agent_start":
        this.body.prepend(el("p", "run-meta", `Agent run · up to ${f.max_steps} steps`));
        break;
      case "agent_turn_start":
        this.step(f.step).phase("thinking");
        break;
      case "agent_reason_delta":
        this.step(f.step).stream("reason", f.delta);
        break;
      case "agent_reason":
        this.step(f.step).finish("reason", f.content).phase("acting");
        break;
      case "tool_start":
        this.tool(f);
        break;
      case "tool_complete":
        this.tool(f).complete(f.result, f.duration_ms);
        break;
      case "tool_error":
        this.tool(f).fail(f.error);
        break;
      case "agent_request_input": {
        const step = this.step(f.step).phase("waiting for you");
        step.note(`Asked you: ${f.question}`, "question");
        if (answers.has(f.tool_call_id)) step.note(`You answered: ${answers.get(f.tool_call_id)}`, "answer");
        break;
      }
      case "agent_request_input_timeout":
        this.step(f.step).note("No answer arrived in time.", "warning");
        break;
      case "agent_observe_delta":
        this.step(f.step).phase("observing").stream("observe", f.delta);
        break;
      case "agent_observe":
        this.step(f.step).finish("observe", f.content).phase("done");
        break;
      case "agent_plan":
        this.step(f.step).note(`Plan: ${f.plan.map((item, i) => `${i + 1}. ${item}`).join("  ")}`, "plan");
        break;
      case "agent_verify":
        this.step(f.step).note(
          f.done ? `Checked: ${f.reason}` : `Not finished yet: ${f.reason}`,
          f.done ? "checked" : "warning",
        );
        break;
      case "agent_research":
        this.notice(`Looked up background first (${f.sources.length} sources).`);
        break;
      case "agent_context":
        this.step(f.step || 1).note(contextNote(f), "context");
        break;
      case "agent_stopped":
        this.notice(`${STOP_REASONS[f.reason] ?? `Stopped (${f.reason})`}${f.step ? ` at step ${f.step}` : ""}.`, "warning");
        break;
      case "agent_completion":
        this.answer(f.final_answer, completionMeta(f));
        break;
      case "chat_delta":
        this.chatStream().append(f.delta);
        break;
      case "chat_response":
        this.answer(f.content, null);
        break;
      case "error":
        this.notice(`Error: ${f.message} (${f.code})`, "error");
        break;
      case "response_complete":
        this.setBusy(false);
        for (const step of this.steps.values()) step.settle();
        this.article.classList.add("complete");
        break;
      default:
        break; // an event this page does not know yet: ignore it, as the protocol may grow
    }
  }

  chatStream() {
    if (!this.chat) {
      this.chat = this.body.appendChild(el("div", "answer streaming"));
      this.chat.setAttribute("aria-busy", "true");
    }
    return this.chat;
  }

  answer(markdown, meta) {
    const node = this.chat ?? this.body.appendChild(el("div"));
    node.className = "answer markdown";
    node.removeAttribute("aria-busy");
    node.replaceChildren(renderMarkdown(markdown));
    this.chat = node;
    if (meta) this.body.append(el("p", "run-meta", meta));
  }
}

function completionMeta(f) {
  const parts = [(COMPLETION[f.stop_reason] ?? COMPLETION.finished)(f.steps)];
  const usage = f.usage ?? {};
  const total = usage.total_tokens ?? ((usage.prompt_tokens ?? 0) + (usage.completion_tokens ?? 0));
  if (total) parts.push(`${total.toLocaleString()} tokens`);
  return parts.join(" · ");
}

class Step {
  constructor(parent, n) {
    this.section = parent.appendChild(el("section", "step"));
    this.section.dataset.step = n;
    const head = this.section.appendChild(el("header", "step-head"));
    head.append(el("span", "badge", `Step ${n}`));
    this.phaseLabel = head.appendChild(el("span", "phase"));
    this.reason = this.section.appendChild(el("div", "reason"));
    this.tools = this.section.appendChild(el("div", "tools"));
    this.notes = this.section.appendChild(el("div", "notes"));
    this.observe = this.section.appendChild(el("div", "observe"));
  }

  phase(name) {
    this.phaseLabel.textContent = name;
    this.section.dataset.phase = name;
    return this;
  }

  /** Grow a block token by token; `finish` replaces it with the full content. */
  stream(part, delta) {
    const node = this[part];
    node.setAttribute("aria-busy", "true");
    node.append(delta);
    return this;
  }

  finish(part, content) {
    const node = this[part];
    node.removeAttribute("aria-busy");
    node.textContent = content;
    return this;
  }

  note(text, kind) {
    this.notes.append(el("p", `note ${kind}`, text));
    return this;
  }

  settle() {
    if (this.section.dataset.phase !== "done") this.phase("");
    this.reason.removeAttribute("aria-busy");
    this.observe.removeAttribute("aria-busy");
  }
}

class ToolCard {
  constructor(parent, f) {
    this.card = parent.appendChild(el("details", "tool running"));
    this.card.dataset.toolCallId = f.tool_call_id;
    const summary = this.card.appendChild(el("summary"));
    summary.append(el("span", "tool-icon", "⚙"), el("span", "tool-name", f.tool_name));
    this.status = summary.appendChild(el("span", "tool-status", "running…"));
    this.body = this.card.appendChild(el("div", "tool-body"));
    this.section("Arguments", pretty(f.arguments ?? {}));
  }

  section(title, text, className = "") {
    this.body.append(el("h4", null, title), el("pre", className, text));
  }

  complete(result, ms) {
    this.card.className = "tool ok";
    this.status.textContent = `✓ ${ms ?? "?"} ms`;
    this.section("Result", pretty(result));
  }

  fail(error) {
    this.card.className = "tool failed";
    this.card.open = true;
    this.status.textContent = "✗ error";
    this.section("Error", String(error), "error");
  }
}
