// The chat list: the caller's sessions from GET /api/sessions, grouped by date, each with a
// running marker and Rename / Delete. The search box filters the titles at once, then shows
// what the server finds in the messages too (GET /api/sessions?q=), the matches marked.

import { api } from "./connection.js";
import { button, el } from "./dom.js";

const DAY_MS = 86_400_000;
const GROUPS = [
  ["Today", 0],
  ["Yesterday", 1],
  ["Previous 7 days", 7],
  ["Previous 30 days", 30],
  ["Older", Infinity],
];
const STATUS_LABEL = { running: "running", awaiting_input: "waiting for your answer" };
const SEARCH_DELAY_MS = 250; // a search per pause in typing, not per key

/** `text` as nodes, each [start, end) of `ranges` in a <mark>: never parsed as HTML. */
function marked(text, ranges) {
  const out = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of [...ranges].sort((a, b) => a[0] - b[0])) {
    if (start < at || end <= start) continue;
    out.append(text.slice(at, start), el("mark", null, text.slice(start, end)));
    at = end;
  }
  out.append(text.slice(at));
  return out;
}

/** Where each word of `query` occurs in `text`, ignoring case. */
function occurrences(text, query) {
  const folded = text.toLocaleLowerCase();
  const ranges = [];
  for (const word of query.toLocaleLowerCase().split(/\s+/).filter(Boolean)) {
    for (let i = folded.indexOf(word); i >= 0; i = folded.indexOf(word, i + word.length)) {
      ranges.push([i, i + word.length]);
    }
  }
  return ranges;
}

/** Which date group a time falls in, counted in whole calendar days back from today. */
export function dateGroup(ts, now = Date.now()) {
  const midnight = new Date(now);
  midnight.setHours(0, 0, 0, 0);
  const daysBack = Math.max(0, Math.ceil((midnight.getTime() - ts) / DAY_MS));
  return GROUPS.find(([, days]) => daysBack <= days)[0];
}

export class ChatList {
  /** `current()`: the open session id; `onOpen(id)`; `willDelete(id)` just before a delete
   *  (the server then closes connections watching it), `onDelete(id)` once it is gone. */
  constructor({ list, search, status, token, current, onOpen, willDelete, onDelete }) {
    Object.assign(this, { list, search, status, token, current, onOpen, willDelete, onDelete });
    this.sessions = [];
    this.found = null; // {query, sessions}: what the server found for a query
    this.searchTimer = null;
    this.searches = 0; // numbers each search, so an answer that comes late is dropped
    search.addEventListener("input", () => {
      this.say(""); // a line about an earlier action is stale once the list changes
      this.render();
      this.searchSoon();
    });
    search.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && search.value) {
        event.stopPropagation(); // clears the search; does not stop a run or close the drawer
        search.value = "";
        this.found = null;
        this.render();
      }
    });
  }

  async refresh() {
    try {
      this.sessions = (await api("api/sessions?limit=100", this.token)).sessions;
    } catch {
      return; // the list is a convenience: the conversation works without it
    }
    if (!this.list.querySelector(".rename-input")) this.render(); // never under the user's typing
    if (this.search.value.trim()) this.searchSoon();
  }

  searchSoon() {
    clearTimeout(this.searchTimer);
    const query = this.search.value.trim();
    if (query) this.searchTimer = setTimeout(() => this.searchServer(query), SEARCH_DELAY_MS);
    else this.found = null;
  }

  /** Ask the server, which also searches what was said; without it the titles stay filtered. */
  async searchServer(query) {
    const number = ++this.searches;
    let sessions;
    try {
      sessions = (await api(`api/sessions?limit=50&q=${encodeURIComponent(query)}`, this.token)).sessions;
    } catch {
      return;
    }
    if (number !== this.searches || query !== this.search.value.trim()) return;
    this.found = { query, sessions };
    if (!this.list.querySelector(".rename-input")) this.render();
  }

  render() {
    const typed = this.search.value.trim();
    const query = typed.toLocaleLowerCase();
    const current = this.current();
    const shown = typed && this.found?.query === typed
      ? this.found.sessions
      : this.sessions
        .filter((s) => s.title || s.session_id === current)
        .filter((s) => !query || (s.title || "New chat").toLocaleLowerCase().includes(query));
    const nodes = [];
    let group = null;
    for (const session of shown) {
      const name = dateGroup(session.updated_at);
      if (name !== group) {
        group = name;
        nodes.push(el("li", "session-group", name));
      }
      nodes.push(this.item(session, session.session_id === current, typed));
    }
    if (!shown.length && query) nodes.push(el("li", "sessions-empty", "No chats match your search."));
    this.list.replaceChildren(...nodes);
  }

  item(session, isCurrent, query = "") {
    const title = session.title || "New chat";
    const li = el("li", "session-item");
    li.dataset.sessionId = session.session_id;
    li.dataset.status = session.status;
    const open = button("session", null, () => this.onOpen(session.session_id));
    const marker = el("span", "session-marker");
    marker.setAttribute("aria-hidden", "true");
    const text = el("span", "session-text");
    const titleNode = text.appendChild(el("span", "session-title"));
    titleNode.append(marked(title, query ? occurrences(title, query) : []));
    if (session.match) {
      const excerpt = text.appendChild(el("span", "session-match"));
      excerpt.append(marked(session.match.text, session.match.highlights));
    }
    open.append(marker, text);
    if (STATUS_LABEL[session.status]) open.append(el("span", "sr-only", ` (${STATUS_LABEL[session.status]})`));
    open.title = `${title}\n${new Date(session.updated_at).toLocaleString()}`;
    if (isCurrent) open.setAttribute("aria-current", "true");
    li.append(open);
    if (session.title) {
      li.append(
        button("session-rename", "✎", () => this.rename(li, session), `Rename “${title}”`),
        button("session-delete", "✕", () => this.confirmRemove(li, session), `Delete “${title}”`),
      );
    }
    return li;
  }

  rename(li, session) {
    this.say("");
    const input = el("input", "rename-input");
    input.value = session.title;
    input.maxLength = 200;
    input.setAttribute("aria-label", "New name for the chat");
    li.replaceChildren(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      if (save && !title) this.say("A chat's name cannot be empty; it keeps its name.");
      if (save && title && title !== session.title) {
        try {
          const path = `api/sessions/${encodeURIComponent(session.session_id)}`;
          Object.assign(session, await api(path, this.token, { method: "PATCH", body: { title } }));
        } catch {
          this.say("The chat could not be renamed. Try again.");
        }
      }
      this.render();
      this.list.querySelector(`[data-session-id="${session.session_id}"] .session`)?.focus();
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // cancels the rename only
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  /** Ask in the list itself (not the browser's dialog); Cancel has the focus, Esc cancels. */
  confirmRemove(li, session) {
    this.say("");
    const cancel = () => {
      this.render();
      this.list.querySelector(`[data-session-id="${session.session_id}"] .session`)?.focus();
    };
    const yes = button("confirm-delete", "Delete", () => this.remove(session),
      `Yes, delete “${session.title}”`);
    const no = button("confirm-cancel", "Cancel", cancel, "Cancel, keep the chat");
    li.classList.add("confirming");
    li.replaceChildren(el("span", "confirm-text", "Delete this chat? It cannot be undone."), yes, no);
    li.addEventListener("keydown", (event) => {
      if (event.key !== "Escape") return;
      event.preventDefault();
      event.stopPropagation(); // cancels the delete only
      cancel();
    });
    no.focus();
  }

  async remove(session) {
    const path = `api/sessions/${encodeURIComponent(session.session_id)}`;
    const wasCurrent = session.session_id === this.current();
    this.willDelete(session.session_id);
    try {
      await api(path, this.token, { method: "DELETE" });
    } catch (error) {
      this.willDelete(null);
      this.say(error.code === "run_in_progress"
        ? "This chat is still running. Stop it first, then delete it."
        : "The chat could not be deleted. Try again.");
      this.render(); // the chat as it was, not the question
      return;
    }
    this.say(`Deleted “${session.title}”.`);
    if (wasCurrent) this.onDelete(session.session_id);
    this.sessions = this.sessions.filter((s) => s !== session);
    this.render();
  }

  say(text) {
    this.status.textContent = text;
  }
}
