// Versions of a turn (docs/wire-protocol.md, "Versions of a turn"): which runs the page shows,
// the ‹ 1/2 › switcher of a turn with several versions, and the editor of a sent message.
// A run whose `agent_user_message` has no `parent_run_id` (an older server, an older run)
// has no versions: it is always shown, and edited in the composer as before.

import { button, el } from "./dom.js";

export class VersionTree {
  constructor() {
    this.parents = new Map(); // run_id -> parent run_id (null: the session's first run)
    this.origins = new Map(); // run_id -> chat | retry | continue
    this.modes = new Map(); // run_id -> agent_mode
    this.path = null; // the shown runs, first first; null: not known (show everything)
    this.saved = null; // the path before `preview`, restored when the server refuses
  }

  clear() {
    this.parents.clear();
    this.origins.clear();
    this.modes.clear();
    this.path = this.saved = null;
  }

  /** Learn a run's place from its `agent_user_message`; a run that starts now (`live`)
   * extends the shown path from its parent. */
  note(frame, live) {
    if (!("parent_run_id" in frame)) return;
    const id = frame.run_id;
    this.parents.set(id, frame.parent_run_id);
    this.origins.set(id, frame.origin ?? "chat");
    this.modes.set(id, frame.agent_mode);
    if (live && this.path) {
      const at = frame.parent_run_id == null ? -1 : this.path.indexOf(frame.parent_run_id);
      this.path = [...this.path.slice(0, at + 1), id];
      this.saved = null;
    }
  }

  setPath(path) {
    this.path = Array.isArray(path) ? [...path] : null;
    this.saved = null;
  }

  /** Show `runId`'s turn as replaced while its new version is on its way. */
  preview(runId) {
    const at = this.path?.indexOf(runId) ?? -1;
    if (at < 0) return;
    this.saved = this.path;
    this.path = this.path.slice(0, at);
  }

  /** The new version was refused: show the turn as it was. */
  cancelPreview() {
    if (this.saved) this.path = this.saved;
    this.saved = null;
  }

  versioned(runId) {
    return this.parents.has(runId);
  }

  shown(runId) {
    return !this.parents.has(runId) || this.path == null || this.path.includes(runId);
  }

  /** The versions of `runId`'s turn, itself among them, in the order they started. */
  versions(runId) {
    if (!this.parents.has(runId)) return [runId];
    const parent = this.parents.get(runId);
    return [...this.parents]
      .filter(([id, p]) => p === parent && this.origins.get(id) !== "continue")
      .map(([id]) => id);
  }

  /** The run holding the user's message of `runId`'s turn (a continuation's is the run it
   * continues). */
  head(runId) {
    let id = runId;
    while (this.origins.get(id) === "continue" && this.parents.get(id)) id = this.parents.get(id);
    return id;
  }
}

/** Under a versioned run's message: ‹ n/m › when its turn has several versions, and Edit.
 * `actions`: select(runId), edit(runId), running (no switch or edit while a run works). */
export function renderTurnTools(run, runId, tree, actions) {
  const bubble = run.article.querySelector(":scope > .bubble.user");
  let bar = run.article.querySelector(":scope > .turn-tools");
  if (!bubble || !tree.versioned(runId) || run.editing) {
    bar?.remove();
    return;
  }
  if (!bar) {
    bar = el("div", "turn-tools");
    bubble.after(bar);
  }
  const versions = tree.versions(runId);
  const at = versions.indexOf(runId);
  const parts = [];
  if (versions.length > 1) {
    const nav = el("div", "versions");
    nav.setAttribute("role", "group");
    nav.setAttribute("aria-label", "Versions of this message");
    const prev = button("version-prev", "‹", () => actions.select(versions[at - 1]), "Previous version");
    const next = button("version-next", "›", () => actions.select(versions[at + 1]), "Next version");
    prev.disabled = at <= 0 || actions.running;
    next.disabled = at >= versions.length - 1 || actions.running;
    const count = el("span", "version-count", `${at + 1}/${versions.length}`);
    count.setAttribute("aria-label", `Version ${at + 1} of ${versions.length}`);
    nav.append(prev, count, next);
    parts.push(nav);
  }
  const edit = button("edit-message", "Edit", () => actions.edit(runId), "Edit this message");
  edit.disabled = actions.running;
  parts.push(edit);
  bar.replaceChildren(...parts);
}

/** Edit `run`'s message in place; `send(text)` sends the new version, Esc or Cancel keep the
 * message as it is; `closed()` is called either way, once the editor is gone. */
export function openEditor(run, send, closed) {
  const bubble = run.article.querySelector(":scope > .bubble.user");
  if (!bubble || run.editing) return;
  run.editing = true;
  run.article.querySelector(":scope > .turn-tools")?.remove();
  const form = el("form", "edit-message-form");
  const box = el("textarea", "edit-box");
  box.value = run.userText ?? "";
  box.rows = Math.min(8, Math.max(2, box.value.split("\n").length));
  box.setAttribute("aria-label", "Edit your message");
  const close = () => {
    run.editing = false;
    form.remove();
    bubble.hidden = false;
    closed();
  };
  const cancel = button("action", "Cancel", close);
  const submit = el("button", "action primary", "Send");
  submit.type = "submit";
  const buttons = el("div", "edit-buttons");
  buttons.append(cancel, submit);
  form.append(box, buttons);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = box.value.trim();
    if (!text) return;
    close();
    send(text);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      close();
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  bubble.hidden = true;
  bubble.after(form);
  box.focus();
  box.setSelectionRange(box.value.length, box.value.length);
}
