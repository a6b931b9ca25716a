// One run as DOM: the user's message, its steps (folded into one line when the run ends),
// tool cards, and the answer, which is what stays in view. Model and tool text only ever
// reaches the page as text nodes or through renderMarkdown, which builds nodes too.

import { decorateCode } from "./code.js";
import { el } from "./dom.js";
import { plainError } from "./errors.js";
import { renderMarkdown } from "./markdown.js";
import { ToolCard } from "./toolcard.js";

const STOP_REASONS = {
  user: "Stopped by you",
  input_timeout: "Stopped: the question was not answered in time",
  shutdown: "Stopped: the server was shutting down",
  interrupted: "Interrupted: the server running it stopped",
  run_timeout: "Stopped: the run took longer than its time limit",
};
const COMPLETION = {
  finished: (n) => `Finished in ${plural(n, "step")}`,
  max_steps: (n) => `Step limit reached after ${plural(n, "step")}`,
  budget: (n) => `Budget ran out after ${plural(n, "step")}`,
  stuck: (n) => `Stopped after ${plural(n, "step")}: the same thing kept failing`,
};

// The phase a step shows for the model call of each of the loop's phases.
const PHASES = { reason: "thinking", act: "acting", observe: "observing" };
// What the step's header says in each phase; the working ones also show a live timer.
const PHASE_LABELS = {
  thinking: "Thinking", acting: "Acting", observing: "Observing", "waiting for you": "Waiting for you",
  "waiting for your approval": "Waiting for your approval", done: "Done",
};
const WORKING = new Set(["thinking", "acting", "observing"]);

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** "0 s", "12 s", "2 min 5 s": a timer that counts up from zero. */
export function elapsed(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

export function duration(ms) {
  const s = Math.max(1, Math.round(ms / 1000));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
}

function contextNote(f) {
  const parts = [];
  if (f.compressed.length) parts.push(`shortened ${f.compressed.length} long result(s)`);
  if (f.dropped_messages) parts.push(`left out ${f.dropped_messages} older message(s)`);
  if (f.collapsed_steps) parts.push(`summarized ${f.collapsed_steps} earlier step(s)`);
  if (f.dropped_steps) parts.push(`left out ${f.dropped_steps} earlier step(s)`);
  return `To fit the model's memory, the agent ${parts.join(", ")}.`;
}

export class Run {
  constructor(article, userText) {
    this.article = article;
    this.steps = new Map();
    this.tools = new Map();
    this.answerNode = null;
    this.approving = null; // the agent_tool_approval frame of a call waiting for the user
    this.work = null; // <details> holding the steps, created with the first one
    this.retryLine = null;
    this.userText = null;
    this.outcome = null; // how it ended: finished | max_steps | budget | stuck | stopped | error
    this.firstTs = null;
    this.lastTs = null;
    this.frameTs = null; // the ts of the frame being applied: when a phase began
    this.markdown = null; // the answer's Markdown source, what "Copy answer" copies
    this.opened = false; // the reader opened part of the work: the end keeps it open
    this.since = null; // when the run began here (its first event's ts): its own timer
    this.ticker = null;
    this.body = article.appendChild(el("div", "run-body"));
    if (userText != null) this.setUserText(userText);
    // `grow(change)`: make a change that grows the run outside of `apply` (the answer's
    // delayed render); the conversation sets it to keep the end in view when it was
    this.grow = (change) => change();
  }

  /** The user's message as a bubble; a run that continues the last one (`origin`
   * "continue") has none: its message is the server's, not something the user wrote. */
  setUserText(text, origin = "chat") {
    if (origin === "continue") {
      this.userText = null;
      this.article.querySelector(":scope > .bubble.user")?.remove();
      this.article.classList.add("continued");
      return;
    }
    if (this.userText != null || this.article.classList.contains("continued")) return;
    this.userText = text;
    this.article.prepend(el("div", "bubble user", text));
  }

  setBusy(busy) {
    this.article.classList.toggle("active", busy);
    if (busy && !this.ticker) {
      this.since ??= this.frameTs ?? Date.now();
      this.tick();
      this.ticker = setInterval(() => this.tick(), 1000);
    } else if (!busy) {
      clearInterval(this.ticker);
      this.ticker = null;
      delete this.body.dataset.elapsed;
    }
  }

  /** Once a second while the run works: the run's own timer (shown until a step shows one)
   * and the working step's. */
  tick() {
    if (!this.article.isConnected && this.ticker) {
      clearInterval(this.ticker); // its chat was closed
      return;
    }
    this.body.dataset.elapsed = elapsed(Date.now() - this.since);
    for (const step of this.steps.values()) step.render();
  }

  get complete() {
    return this.article.classList.contains("complete");
  }

  notice(text, kind = "info") {
    this.body.append(el("p", `notice ${kind}`, text));
  }

  step(n) {
    let step = this.steps.get(n);
    if (!step) {
      if (!this.work) this.createWork();
      step = new Step(this.work.querySelector(".steps"), n, () => this.frameTs);
      this.steps.set(n, step);
    }
    return step;
  }

  createWork() {
    this.work = el("details", "work");
    this.work.open = true;
    this.work.append(el("summary", "work-summary", "Working…"), el("div", "steps"));
    // What the reader opens (a tool card, the steps after a fold) stays open at the end.
    this.work.addEventListener("click", (event) => {
      if (event.isTrusted && event.target.closest("summary")) this.opened = true;
    });
    // the steps go above anything already shown below them (an answer, notices)
    const after = this.body.querySelector(":scope > .answer, :scope > .notice");
    this.body.insertBefore(this.work, after);
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
    this.frameTs = typeof f.ts === "number" ? f.ts : null;
    if (this.frameTs != null) {
      this.firstTs ??= f.ts;
      this.lastTs = f.ts;
    }
    this.setBusy(true);
    const kind = f.update_type ?? f.type;
    if (kind !== "agent_llm_retry") this.clearRetry();
    if (this.approving && kind !== "agent_tool_approval") this.approvalDecided(f);
    switch (kind) {
      case "agent_user_message":
        this.setUserText(f.content, f.origin);
        break;
      case "agent_turn_start":
        this.step(f.step).phase("thinking");
        break;
      case "agent_reasoning_delta":
        if (f.step) this.step(f.step).phase(PHASES[f.phase] ?? null).stream("thinking", f.delta);
        break;
      case "agent_reason_delta":
        this.step(f.step).stream("reason", f.delta);
        break;
      case "agent_reason":
        this.step(f.step).finish("reason", f.content).phase("acting");
        break;
      case "agent_llm_retry":
        this.retrying(f.attempt, f.max_attempts);
        if (f.step && PHASES[f.phase]) this.step(f.step).phase(PHASES[f.phase]); // its call
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
        if (answers.has(f.tool_call_id)) step.answer(f.tool_call_id, answers.get(f.tool_call_id));
        break;
      }
      case "agent_tool_approval":
        this.step(f.step).phase("waiting for your approval");
        this.tool(f).awaitApproval();
        this.approving = f;
        break;
      case "agent_user_answer":
        this.step(f.step).answer(f.tool_call_id, f.content).phase("acting");
        break;
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
        // a check that lets the answer stand says nothing the reader needs (its reason is
        // the server's own wording); one that sends the agent back to work does
        if (!f.done) this.step(f.step).note(`Not finished yet: ${f.reason}`, "warning");
        break;
      case "agent_research":
        this.notice(`Looked up background first (${f.sources.length} sources).`);
        break;
      case "agent_context":
        this.step(f.step || 1).note(contextNote(f), "context");
        for (const cut of f.compressed ?? []) {
          this.tools.get(cut.result_id)?.cut(cut.kept_tokens, cut.tokens);
        }
        break;
      case "agent_stopped":
        this.outcome = "stopped";
        this.notice(`${STOP_REASONS[f.reason] ?? "Stopped"}${f.step ? ` at step ${f.step}` : ""}.`, "warning");
        break;
      case "agent_answer_delta":
      case "chat_delta":
        this.appendAnswer(f.delta);
        break;
      case "agent_completion":
        this.outcome = f.stop_reason in COMPLETION ? f.stop_reason : "finished";
        this.answer(f.final_answer, completionMeta(f));
        break;
      case "chat_response":
        this.outcome = "finished";
        this.answer(f.content, null);
        break;
      case "error":
        this.outcome = "error";
        this.notice(plainError(f.code, f.message), "error");
        break;
      case "response_complete":
        this.end();
        break;
      default:
        break; // an event this page does not know yet: ignore it, as the protocol may grow
    }
  }

  /** The call that waited for approval goes on (approved) or ends (denied, timed out): the
   * frame after it says which, and the card and the step follow. */
  approvalDecided(f) {
    const waited = this.approving;
    this.approving = null;
    this.tools.get(waited.tool_call_id)?.resume(f.ts);
    this.step(waited.step).phase("acting");
  }

  retrying(attempt, max) {
    this.retryLine ??= this.body.appendChild(el("p", "retrying"));
    this.retryLine.textContent = `The model did not answer; retrying (${attempt}/${max})…`;
  }

  clearRetry() {
    this.retryLine?.remove();
    this.retryLine = null;
  }

  /** The answer grows as Markdown while it streams, rendered again at most once a frame (less
   * often when rendering it takes long: a long answer must not make the page stutter). */
  appendAnswer(delta) {
    if (!this.answerNode) {
      this.answerNode = this.body.appendChild(el("div", "answer markdown streaming"));
      this.answerNode.setAttribute("aria-busy", "true");
      this.streamed = "";
    }
    this.streamed += delta;
    if (this.renderTimer) return;
    const wait = Math.min(1000, (this.renderCost ?? 0) * 4);
    this.renderTimer = setTimeout(() => requestAnimationFrame(() => {
      this.renderTimer = null;
      const node = this.answerNode;
      if (!node?.classList.contains("streaming")) return; // the whole answer came meanwhile
      const started = performance.now();
      this.grow(() => node.replaceChildren(renderMarkdown(this.streamed)));
      this.renderCost = performance.now() - started;
    }), wait);
  }

  answer(markdown, meta) {
    this.markdown = markdown;
    const node = this.answerNode ?? this.body.appendChild(el("div"));
    node.className = "answer markdown";
    node.removeAttribute("aria-busy");
    node.replaceChildren(renderMarkdown(markdown));
    decorateCode(node);
    this.answerNode = node;
    if (meta) this.body.append(el("p", "run-meta", meta));
  }

  /** The run is over: settle its steps and, when it has an answer, fold them to one line. */
  end() {
    this.setBusy(false);
    this.clearRetry();
    if (this.answerNode?.classList.contains("streaming")) this.settleCutAnswer();
    for (const [n, step] of this.steps) {
      if (step.empty) {
        // opened by agent_turn_start, then the run failed or stopped before it showed anything
        step.section.remove();
        this.steps.delete(n);
      } else {
        step.settle();
      }
    }
    this.article.classList.add("complete");
    if (this.work && !this.steps.size && !this.tools.size) {
      this.work.remove();
      this.work = null;
    }
    if (!this.work) return;
    const parts = [];
    if (this.firstTs != null && this.lastTs > this.firstTs) {
      parts.push(`Worked for ${duration(this.lastTs - this.firstTs)}`);
    }
    const stepCount = [...this.steps.keys()].filter((n) => n > 0).length;
    if (stepCount) parts.push(plural(stepCount, "step"));
    if (this.tools.size) parts.push(plural(this.tools.size, "tool"));
    this.work.querySelector(".work-summary").textContent = parts.join(" · ");
    // A run that ended without its answer (stopped, failed) keeps its steps in view, and
    // so does one whose steps the reader opened.
    if (this.answerNode && this.outcome !== "stopped" && this.outcome !== "error" && !this.opened) {
      this.work.open = false;
    }
  }

  /** The answer's Markdown source (what streamed, for an answer that was cut off). */
  get answerText() {
    return this.markdown ?? this.streamed ?? "";
  }

  /** The answer stopped streaming before it was complete (a stop, a failure): render what
   * came, marked as partial, and let screen readers read it. */
  settleCutAnswer() {
    this.markdown = this.streamed;
    const node = this.answerNode;
    node.className = "answer markdown partial";
    node.removeAttribute("aria-busy");
    node.replaceChildren(renderMarkdown(this.streamed));
    decorateCode(node);
    node.append(el("p", "answer-cut", "(The answer was cut off here.)"));
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
  /** `clock()`: the ts of the frame being applied (null: now), when a phase begins. */
  constructor(parent, n, clock) {
    this.clock = clock;
    this.since = null; // when the current phase began (epoch ms)
    this.tokens = 0; // pieces of text the model streamed in the current phase
    this.section = parent.appendChild(el("section", "step"));
    this.section.dataset.step = n;
    const head = this.section.appendChild(el("header", "step-head"));
    head.append(el("span", "badge", n ? `Step ${n}` : "Tools"));
    this.phaseLabel = head.appendChild(el("span", "phase"));
    this.phaseLabel.setAttribute("aria-live", "off"); // a ticking timer is not news
    this.thinking = this.section.appendChild(el("div", "thinking"));
    this.reason = this.section.appendChild(el("div", "reason"));
    this.tools = this.section.appendChild(el("div", "tools"));
    this.notes = this.section.appendChild(el("div", "notes"));
    this.observe = this.section.appendChild(el("div", "observe"));
    this.answers = new Set(); // tool_call_ids whose answer is shown
  }

  /** Enter phase `name` (null: stay in the current one); a new phase restarts the timer. */
  phase(name) {
    if (name != null && name !== this.section.dataset.phase) {
      this.section.dataset.phase = name;
      this.since = this.clock() ?? Date.now();
      this.tokens = 0;
    }
    this.render();
    return this;
  }

  /** "Thinking · 12 s · 48 tokens": the phase, how long it has worked, what it streamed. */
  render() {
    const name = this.section.dataset.phase ?? "";
    let text = PHASE_LABELS[name] ?? name;
    if (WORKING.has(name) && this.since != null) {
      text += ` · ${elapsed(Date.now() - this.since)}`;
      if (this.tokens) text += ` · ${plural(this.tokens, "token")}`;
    }
    if (this.phaseLabel.textContent !== text) this.phaseLabel.textContent = text;
  }

  /** Grow a block token by token, quietly; `finish` replaces it with the full content. */
  stream(part, delta) {
    const node = this[part];
    node.setAttribute("aria-busy", "true");
    node.append(delta);
    this.tokens += 1;
    this.render();
    return this;
  }

  finish(part, content) {
    const node = this[part];
    node.removeAttribute("aria-busy");
    node.textContent = content;
    this.thinking.removeAttribute("aria-busy");
    return this;
  }

  note(text, kind) {
    this.notes.append(el("p", `note ${kind}`, text));
    return this;
  }

  /** Show the user's answer to a question once, whoever reports it first. */
  answer(toolCallId, text) {
    if (!this.answers.has(toolCallId)) {
      this.answers.add(toolCallId);
      this.note(`You answered: ${text}`, "answer");
    }
    return this;
  }

  /** Nothing was shown in this step: no thinking, text, tool call, note or observation. */
  get empty() {
    return [this.thinking, this.reason, this.tools, this.notes, this.observe].every(
      (node) => !node.hasChildNodes(),
    );
  }

  settle() {
    if (this.section.dataset.phase !== "done") this.phase("");
    this.since = null;
    this.render();
    for (const node of [this.thinking, this.reason, this.observe]) node.removeAttribute("aria-busy");
  }
}
