// The chat page: wires the controls, the connection, the conversation view and the sidebar.

import { Connection, HttpError, api, loadSaved } from "./connection.js";
import { Conversation, el } from "./view.js";
import { ApprovalPrompt, ToolsPanel } from "./tools.js";

const $ = (id) => document.getElementById(id);
const ui = {
  conversation: $("conversation"), message: $("message"), composer: $("composer"),
  send: $("send"), agentMode: $("agent-mode"), maxSteps: $("max-steps"), conn: $("conn"),
  sessions: $("sessions"), newChat: $("new-chat"), ask: $("ask"), askForm: $("ask-form"),
  askQuestion: $("ask-question"), askAnswer: $("ask-answer"), askExpiry: $("ask-expiry"),
  announcer: $("announcer"),
};
const BASE_TITLE = document.title;
const PREFS = "agent-chat:prefs";

const token = takeToken();
const view = new Conversation(ui.conversation);
const state = {
  running: false, // a run of this session is running or awaiting input
  stopping: false,
  pending: null, // the question waiting for an answer: {question, tool_call_id, step, run_id}
  sessionLastSeq: 0, // last_seq of the latest `session` frame: frames up to it are history
};
const conn = new Connection({ token, onFrame, onState });
const toolsPanel = new ToolsPanel({ token, container: document.querySelector(".controls") });
const approval = new ApprovalPrompt({
  before: ui.composer, send: (frame) => conn.send(frame), announce: (text) => announce(text),
});
toolsPanel.load();

// -- the token: ?token= in the page URL, kept for this tab, removed from the address bar ------

function takeToken() {
  const params = new URLSearchParams(location.search);
  const fromUrl = params.get("token");
  if (fromUrl) {
    sessionStorage.setItem("agent-chat:token", fromUrl);
    params.delete("token");
    const query = params.toString();
    history.replaceState(null, "", location.pathname + (query ? `?${query}` : "") + location.hash);
  }
  return fromUrl || sessionStorage.getItem("agent-chat:token") || null;
}

// -- frames ----------------------------------------------------------------------------------

function onFrame(frame) {
  if (frame.type === "session") return onSession(frame);
  const live = typeof frame.seq !== "number" || frame.seq > state.sessionLastSeq;
  if (frame.type === "error" && !frame.run_id) return onClientError(frame);
  if (frame.run_id) view.apply(frame);
  if (live) follow(frame);
}

function onSession(frame) {
  state.sessionLastSeq = frame.last_seq;
  setRunning(frame.status !== "idle");
  const pending = frame.pending_input;
  if (pending) ask({ ...pending, run_id: null });
  else hideAsk();
  approval.sync(frame.pending_approval);
  refreshSessions();
}

/** Page state that follows live events (replayed history only renders). */
function follow(frame) {
  const kind = frame.update_type ?? frame.type;
  approval.follow(frame);
  if (state.pending && kind !== "agent_request_input") hideAsk(); // answered, maybe elsewhere
  switch (kind) {
    case "agent_start":
      setRunning(true);
      if (!ui.maxSteps.dataset.touched) ui.maxSteps.value = frame.max_steps;
      refreshSessions();
      break;
    case "chat_delta":
      setRunning(true);
      break;
    case "agent_request_input":
      ask(frame);
      break;
    case "agent_request_input_timeout":
      announce("The question timed out.");
      break;
    case "agent_stopped":
      announce("The run was stopped.");
      break;
    case "agent_completion":
      announce(`Answer: ${frame.final_answer}`);
      break;
    case "chat_response":
      announce(`Answer: ${frame.content}`);
      break;
    case "response_complete":
      setRunning(false);
      refreshSessions();
      break;
    default:
      break;
  }
}

function onClientError(frame) {
  if (frame.code === "session_not_found") return; // the close that follows handles it
  approval.onError(frame);
  const text = `${frame.message} (${frame.code})`;
  if (["run_in_progress", "too_many_runs", "invalid_message"].includes(frame.code) &&
      view.rejectPending(`Not sent: ${text}`)) {
    if (frame.code !== "run_in_progress") setRunning(false);
  } else {
    view.notice(text, "error");
  }
  if (frame.code === "no_active_run" || frame.code === "not_awaiting_input") {
    state.stopping = false;
    if (frame.code === "not_awaiting_input") hideAsk();
    else setRunning(false);
  }
  announce(frame.message);
}

function onState(connState) {
  const labels = {
    connecting: "Connecting…", connected: "Connected", reconnecting: "Reconnecting…",
    gone: "Conversation not found", unauthorized: "Not authorized",
  };
  ui.conn.dataset.state = connState;
  ui.conn.textContent = labels[connState] ?? connState;
  if (connState === "gone") {
    view.notice("That conversation no longer exists; a new one was started.", "warning");
    startNewChat();
  }
  if (connState === "unauthorized") view.notice("The server refused this page's token.", "error");
}

// -- the run controls --------------------------------------------------------------------------

function setRunning(running) {
  state.running = running;
  if (!running) state.stopping = false;
  ui.send.textContent = running ? (state.stopping ? "Stopping…" : "Stop") : "Send";
  ui.send.classList.toggle("stop", running);
  ui.send.disabled = running && state.stopping;
  ui.send.setAttribute("aria-label", running ? "Stop the run (Esc)" : "Send (Enter)");
  document.body.classList.toggle("running", running);
}

function sendMessage() {
  const content = ui.message.value.trim();
  if (!content || state.running) return;
  const frame = { type: "chat", content, agent_mode: ui.agentMode.checked };
  const tools = toolsPanel.selected();
  if (tools) frame.tools = tools;
  if (ui.agentMode.checked && ui.maxSteps.dataset.touched) {
    const steps = Number(ui.maxSteps.value);
    if (!Number.isInteger(steps) || steps < 1) {
      view.notice("Max steps must be a whole number of at least 1.", "error");
      ui.maxSteps.focus();
      return;
    }
    frame.agent_max_steps = steps;
  }
  if (!conn.send(frame)) {
    view.notice("Not connected: the message was not sent. It is still in the box.", "error");
    return;
  }
  view.expect(content);
  view.scrollToEnd();
  ui.message.value = "";
  setRunning(true);
}

function stopRun() {
  if (!state.running || state.stopping) return;
  if (!conn.send({ type: "agent_control", action: "stop" })) {
    view.notice("Not connected: the stop could not be sent.", "error");
    return;
  }
  state.stopping = true;
  setRunning(true);
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  if (state.running) stopRun();
  else sendMessage();
});
ui.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    sendMessage();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.running) {
    event.preventDefault();
    stopRun();
  }
});
for (const input of [ui.agentMode, ui.maxSteps]) {
  input.addEventListener("change", () => {
    if (input === ui.maxSteps) ui.maxSteps.dataset.touched = "1";
    ui.maxSteps.disabled = !ui.agentMode.checked;
    localStorage.setItem(PREFS, JSON.stringify({
      agentMode: ui.agentMode.checked,
      maxSteps: ui.maxSteps.dataset.touched ? ui.maxSteps.value : null,
    }));
  });
}

function restorePrefs() {
  try {
    const prefs = JSON.parse(localStorage.getItem(PREFS) ?? "{}") ?? {};
    if (typeof prefs.agentMode === "boolean") ui.agentMode.checked = prefs.agentMode;
    if (prefs.maxSteps) {
      ui.maxSteps.value = prefs.maxSteps;
      ui.maxSteps.dataset.touched = "1";
    }
  } catch {
    localStorage.removeItem(PREFS);
  }
  ui.maxSteps.disabled = !ui.agentMode.checked;
}

// -- questions from the agent (request_input) ---------------------------------------------------

let flashTimer = null;
let expiryTimer = null;

function ask(question) {
  state.pending = question;
  ui.askQuestion.textContent = question.question;
  ui.ask.hidden = false;
  document.body.classList.add("awaiting");
  ui.askAnswer.focus();
  announce(`The agent asks: ${question.question}`);
  clearInterval(flashTimer);
  let on = false;
  const flash = () => {
    on = !on;
    document.title = on ? `❓ Input needed — ${BASE_TITLE}` : BASE_TITLE;
  };
  flash();
  flashTimer = setInterval(flash, 1000); // timers keep running, throttled, in background tabs
  clearInterval(expiryTimer);
  const showExpiry = () => {
    const left = Math.max(0, Math.round((question.expires_at - Date.now()) / 1000));
    ui.askExpiry.textContent = question.expires_at
      ? `Answer within ${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}` : "";
  };
  showExpiry();
  expiryTimer = setInterval(showExpiry, 1000);
}

function hideAsk() {
  state.pending = null;
  ui.ask.hidden = true;
  document.body.classList.remove("awaiting");
  clearInterval(flashTimer);
  clearInterval(expiryTimer);
  document.title = BASE_TITLE;
}

ui.askForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const content = ui.askAnswer.value;
  const pending = state.pending;
  if (!pending || !content.trim()) return;
  if (!conn.send({ type: "agent_user_input", content })) {
    view.notice("Not connected: the answer was not sent.", "error");
    return;
  }
  const runId = pending.run_id ?? ui.conversation.querySelector("article.run:last-of-type")?.dataset.runId;
  view.noteAnswer(runId, pending.step, content);
  ui.askAnswer.value = "";
  hideAsk();
  ui.message.focus();
});
ui.askAnswer.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.askForm.requestSubmit();
  }
});

function announce(text) {
  ui.announcer.textContent = text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

// -- sessions ----------------------------------------------------------------------------------

async function refreshSessions() {
  let sessions;
  try {
    sessions = (await api("api/sessions?limit=50", token)).sessions;
  } catch {
    return; // the list is a convenience: the conversation works without it
  }
  const items = sessions
    .filter((s) => s.title || s.session_id === conn.sessionId)
    .map((s) => {
      const button = el("button", "session", null);
      button.type = "button";
      button.append(el("span", "session-title", s.title || "New chat"),
        el("span", "session-time", new Date(s.updated_at).toLocaleString()));
      button.dataset.sessionId = s.session_id;
      button.dataset.status = s.status;
      if (s.session_id === conn.sessionId) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => openSession(s.session_id));
      const li = el("li");
      li.append(button);
      return li;
    });
  ui.sessions.replaceChildren(...items);
}

async function loadMessages(sessionId) {
  try {
    view.setHistory((await api(`api/sessions/${encodeURIComponent(sessionId)}/messages?limit=500`, token)).messages);
  } catch {
    // without it a replay shows the runs but not what the user wrote
  }
}

/** Open a stored session: render its history from the replayed events (after_seq=0). */
async function openSession(sessionId) {
  if (sessionId === conn.sessionId) return;
  resetPage();
  await loadMessages(sessionId);
  conn.open(sessionId, 0);
  ui.message.focus();
}

function startNewChat() {
  resetPage();
  conn.open(null);
  ui.message.focus();
}

function resetPage() {
  view.clear();
  hideAsk();
  setRunning(false);
  state.sessionLastSeq = 0;
}

ui.newChat.addEventListener("click", startNewChat);

/** After a reload: show what this tab had seen (up to its last seq), then resume after it. */
async function resume(saved) {
  await loadMessages(saved.sessionId);
  if (saved.lastSeq > 0) {
    try {
      const path = `api/sessions/${encodeURIComponent(saved.sessionId)}/events?after_seq=0`;
      const { events } = await api(path, token);
      state.sessionLastSeq = saved.lastSeq;
      for (const frame of events) if (frame.seq <= saved.lastSeq && frame.run_id) view.apply(frame);
    } catch (error) {
      if (error instanceof HttpError && error.status === 404) return startNewChat();
      view.clear();
      return conn.open(saved.sessionId, 0); // no history by HTTP: replay it all over the socket
    }
  }
  conn.open(saved.sessionId, saved.lastSeq);
}

restorePrefs();
setRunning(false);
const saved = loadSaved();
if (saved?.sessionId) resume(saved);
else conn.open(null);
ui.message.focus();
