// The conversation view: turns docs/wire-protocol.md run events into DOM, one <article> per run
// (run.js), keeps the newest content in view unless the reader scrolled up, and offers a
// way forward under the last run (Retry, Continue, Edit, Regenerate). Of a turn with several
// versions only the shown one is in view (versions.js).

import { copyButton } from "./code.js";
import { button, el } from "./dom.js";
import { Run } from "./run.js";
import { VersionTree, openEditor, renderTurnTools } from "./versions.js";

export { el };

const NEAR_BOTTOM_PX = 120;

/** Render run events into `root`; user messages come from `expect()`, events or history. */
export class Conversation {
  constructor(root, { onScrollState } = {}) {
    this.root = root;
    this.onScrollState = onScrollState ?? (() => {});
    this.runs = new Map(); // run_id -> Run
    this.userTexts = new Map(); // run_id -> the user's message (from the messages API)
    this.answers = new Map(); // request_input tool_call_id -> the user's answer
    this.pending = null; // the Run of a message sent but not yet started by the server
    this.tree = new VersionTree();
    // What the page does for a version: select(runId), send(text, replaces), running()
    this.versionActions = null;
    root.addEventListener("scroll", () => this.onScrollState(this.atBottom()), { passive: true });
  }

  get isEmpty() {
    return !this.root.querySelector("article.run, .notice");
  }

  clear() {
    this.root.replaceChildren();
    this.runs.clear();
    this.userTexts.clear();
    this.answers.clear();
    this.tree.clear();
    this.pending = null;
    this.onScrollState(true);
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
    this.scrollToEnd();
    return this.pending;
  }

  /** The server refused the message just sent: take it off the page; return its text. */
  rejectPending() {
    const run = this.pending;
    if (!run) return null;
    run.article.remove();
    this.pending = null;
    return run.userText;
  }

  notice(text, kind = "info") {
    this.append(el("p", `notice ${kind}`, text));
  }

  /** Record the answer to a question in the step that asked it. */
  noteAnswer(runId, step, toolCallId, text) {
    this.answers.set(toolCallId, text);
    const run = this.runs.get(runId) ?? this.lastRun();
    run?.step(step).answer(toolCallId, text);
  }

  append(node) {
    const stick = this.atBottom();
    this.root.append(node);
    if (stick) this.scrollToEnd();
    return node;
  }

  atBottom() {
    const r = this.root;
    return r.scrollHeight - r.scrollTop - r.clientHeight < NEAR_BOTTOM_PX;
  }

  scrollToEnd() {
    this.root.scrollTop = this.root.scrollHeight;
    this.onScrollState(true);
  }

  /** Apply one server frame that carries a run_id; `live`: not a replay of the history. */
  apply(frame, live = false) {
    const kind = frame.update_type ?? frame.type;
    if (kind === "agent_user_message") this.tree.note(frame, live);
    const stick = this.atBottom();
    // the end of a run folds its steps: what the reader looks at must not jump away
    const anchor = !stick && frame.type === "response_complete" ? this.anchor() : null;
    const run = this.run(frame.run_id);
    if (anchor && run.work?.contains(anchor.node)) run.opened = true; // reading the steps
    run.apply(frame, this.answers);
    if (kind === "agent_user_message" || kind === "response_complete") this.refreshVersions();
    if (stick) this.scrollToEnd();
    else {
      if (anchor) this.keepInPlace(anchor);
      this.onScrollState(false);
    }
  }

  /** The element at the top of the view, and where it is. */
  anchor() {
    const box = this.root.getBoundingClientRect();
    const node = document.elementFromPoint(box.left + box.width / 2, box.top + 8);
    return node && this.root.contains(node) && node !== this.root
      ? { node, top: node.getBoundingClientRect().top }
      : null;
  }

  /** Scroll so that `anchor` (or, when a fold hid it, the fold's summary) stays put. */
  keepInPlace({ node, top }) {
    let target = node;
    if (!target.isConnected || !target.getClientRects().length) {
      target = node.closest?.("details.work")?.querySelector(".work-summary") ?? null;
    }
    if (!target?.getClientRects().length) return;
    this.root.scrollTop += target.getBoundingClientRect().top - top;
  }

  run(runId) {
    let run = this.runs.get(runId);
    if (!run) {
      run = this.pending ?? new Run(this.append(el("article", "run")), this.userTexts.get(runId));
      this.pending = null;
      run.article.dataset.runId = runId;
      run.grow = (change) => {
        const stick = this.atBottom();
        change();
        if (stick) this.scrollToEnd();
      };
      this.runs.set(runId, run);
    }
    return run;
  }

  lastRun() {
    const article = [...this.root.querySelectorAll("article.run:not([hidden])")].at(-1);
    return article ? [...this.runs.values()].find((r) => r.article === article) ?? null : null;
  }

  // -- versions of a turn ----------------------------------------------------------------------

  /** The shown path changed (the `session` frame, an `active_path` event). */
  setPath(path) {
    this.tree.setPath(path);
    this.refreshVersions();
  }

  /** A new version of `runId`'s turn was sent: its old one goes out of view meanwhile. */
  previewReplace(runId) {
    this.tree.preview(runId);
    this.refreshVersions();
  }

  cancelPreview() {
    this.tree.cancelPreview();
    this.refreshVersions();
  }

  /** Show the runs of the shown path, each turn's switcher and Edit, and Regenerate under
   * every finished answer but the last (the last run's bar has it). */
  refreshVersions() {
    const actions = this.versionActions;
    if (!actions) return;
    const running = actions.running();
    const tools = { running, select: actions.select, edit: (id) => this.edit(id) };
    for (const [id, run] of this.runs) {
      run.article.hidden = !this.tree.shown(id);
      renderTurnTools(run, id, this.tree, tools);
    }
    const last = this.lastRun();
    for (const [id, run] of this.runs) {
      const head = this.runs.get(this.tree.head(id));
      const wanted = run !== last && run.complete && !run.article.hidden &&
        this.tree.versioned(id) && head?.userText != null;
      let bar = run.article.querySelector(":scope > .run-tools");
      if (!wanted) {
        bar?.remove();
        continue;
      }
      if (!bar) {
        bar = run.article.appendChild(el("div", "run-tools"));
        bar.append(button("action", "Regenerate", () => this.regenerate(id), "Regenerate this answer"));
      }
      bar.querySelector("button").disabled = running;
    }
  }

  /** Edit the message of `runId`'s turn in place, as a new version of it. */
  edit(runId) {
    const head = this.tree.head(runId);
    const run = this.runs.get(head);
    if (!run || this.versionActions?.running()) return;
    openEditor(
      run,
      (text) => this.versionActions.send(text, head),
      () => this.refreshVersions(),
    );
  }

  /** Run `runId`'s turn again with the same message, as a new version of it. */
  regenerate(runId) {
    const head = this.tree.head(runId);
    const text = this.runs.get(head)?.userText;
    if (text != null) this.versionActions?.send(text, head);
  }

  /** The buttons under the last finished run; `handlers` has retry, resume, edit, regenerate. */
  showActions(handlers) {
    this.hideActions();
    const run = this.lastRun();
    if (!run || !run.complete) return;
    const bar = el("div", "run-actions");
    bar.setAttribute("role", "group");
    bar.setAttribute("aria-label", "What next");
    // A run with versions is run again, or edited, as a new version of its turn
    const runId = run.article.dataset.runId;
    const versioned = this.tree.versioned(runId) && this.runs.get(this.tree.head(runId))?.userText != null;
    if (run.outcome === "error" || run.outcome === "stopped" || run.outcome === "stuck") {
      const retry = versioned ? () => this.regenerate(runId) : handlers.retry;
      bar.append(button("action primary", "Retry", retry));
    } else if (run.outcome === "max_steps") {
      bar.append(button("action primary", "Continue", handlers.resume));
    }
    // a run started by Continue or Retry has no message of its own: use the last one written
    const text = [...this.runs.values()].reverse().find((r) => r.userText != null)?.userText;
    if (text != null) {
      if (run.outcome === "finished" || run.outcome === "max_steps" || run.outcome === "budget") {
        const regenerate = versioned ? () => this.regenerate(runId) : () => handlers.regenerate(text);
        bar.append(button("action", "Regenerate", regenerate));
      }
      const edit = versioned ? () => this.edit(runId) : () => handlers.edit(text);
      bar.append(button("action", "Edit message", edit));
    }
    if (run.answerNode) bar.append(copyButton(() => run.answerText, "Copy answer"));
    if (bar.childElementCount) this.append(bar);
  }

  hideActions() {
    for (const bar of this.root.querySelectorAll(".run-actions")) bar.remove();
  }
}
