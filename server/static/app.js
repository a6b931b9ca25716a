// The chat page: wires the connection, the composer, the conversation view, the question
// banner and the chat list together. The composer is the one text box: it sends messages,
// and answers the agent's question while one is pending.

import { ChatList } from "./chats.js";
import { Composer } from "./composer.js";
import { Connection, HttpError, api, loadSaved } from "./connection.js";
import { Drawer } from "./drawer.js";
import { plainError } from "./errors.js";
import { QuestionBanner } from "./question.js";
import { Conversation } from "./view.js";
import { ApprovalPrompt, ToolsPanel } from "./tools.js";

const $ = (id) => document.getElementById(id);
const ui = {
  conversation: $("conversation"), message: $("message"), form: $("composer"), conn: $("conn"),
  welcome: $("welcome"), welcomeModel: $("welcome-model"), jump: $("jump"),
  announcer: $("announcer"),
};

const fromLink = new URLSearchParams(location.search).has("token"); // read before takeToken
const token = takeToken();
const state = {
  online: false, // the socket is open and its `session` frame arrived
  running: false, // a run of this session is running or awaiting input
  stopping: false,
  controlSent: false, // a retry/continue was sent and its run has not started yet
  queued: null, // a chat frame waiting for the connection: {frame, run}
  lastAnswer: null, // the answer just sent, put back if the server refuses it
  deleting: null, // the session being deleted from the chat list
  sessionLastSeq: 0, // last_seq of the latest `session` frame: frames up to it are history
};
const composer = new Composer({
  box: ui.message, label: $("message-label"), button: $("send"), note: $("composer-note"),
  agentMode: $("agent-mode"), maxSteps: $("max-steps"),
});
const note = (text, kind) => composer.note(text, kind);
const view = new Conversation(ui.conversation, { onScrollState: (atEnd) => (ui.jump.hidden = atEnd) });
const banner = new QuestionBanner({ banner: $("ask"), question: $("ask-question"), expiry: $("ask-expiry") });
const conn = new Connection({ token, onFrame, onState });
const toolsPanel = new ToolsPanel({ token, container: document.querySelector(".controls") });
const approval = new ApprovalPrompt({
  before: ui.form, send: (frame) => conn.send(frame), announce: (text) => announce(text),
});
toolsPanel.load();
const chats = new ChatList({
  list: $("sessions"), search: $("chat-search"), status: $("sessions-status"), token,
  current: () => conn.sessionId,
  onOpen: (id) => { drawer.close(false); openSession(id); },
  willDelete: (id) => (state.deleting = id),
  onDelete: (id) => id === conn.sessionId && startNewChat(),
});
const drawer = new Drawer({
  drawer: $("drawer"), toggle: $("menu"), scrim: $("scrim"), main: $("main"),
  focusFirst: $("chat-search"),
});

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
  if (frame.type === "session_title") return chats.refresh(); // the model named the chat
  const live = typeof frame.seq !== "number" || frame.seq > state.sessionLastSeq;
  if (frame.type === "error" && !frame.run_id) return onClientError(frame);
  if (frame.type === "active_path") return live && showPath(frame.active_path);
  if (frame.run_id) view.apply(frame, live);
  if (live) follow(frame);
  else if (frame.seq === state.sessionLastSeq) refreshActions(); // the history is complete
  updateWelcome();
}

let sessionModel = ""; // the model the session frame names
let bundledModel = false; // /api/me: the server runs its bundled small model

function onSession(frame) {
  state.sessionLastSeq = frame.last_seq;
  if ("active_path" in frame) view.setPath(frame.active_path);
  composer.setDefaults(frame.defaults);
  sessionModel = frame.model || "";
  describeModel();
  setRunning(frame.status !== "idle");
  if (frame.pending_input) ask({ ...frame.pending_input, run_id: null });
  else hideAsk();
  approval.sync(frame.pending_approval);
  chats.refresh();
  refreshActions();
  updateWelcome();
  flushQueue();
}

/** Page state that follows live events (replayed history only renders). */
function follow(frame) {
  const kind = frame.update_type ?? frame.type;
  approval.follow(frame);
  // any event after a question means it was answered, maybe in another tab
  if (banner.current && kind !== "agent_request_input") hideAsk();
  switch (kind) {
    case "agent_user_message":
    case "agent_start":
    case "chat_delta":
      state.controlSent = false;
      setRunning(true);
      view.hideActions();
      if (kind !== "chat_delta") chats.refresh();
      break;
    case "agent_request_input":
      ask(frame);
      break;
    case "agent_llm_retry":
      announce(`The model did not answer; retrying (${frame.attempt}/${frame.max_attempts}).`);
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
    case "error":
      announce(plainError(frame.code, frame.message));
      break;
    case "response_complete":
      state.controlSent = false;
      setRunning(false);
      chats.refresh();
      refreshActions();
      flushQueue();
      break;
    default:
      break;
  }
}

function onClientError(frame) {
  if (frame.code === "session_not_found") return; // the close that follows handles it
  approval.onError(frame);
  let text = plainError(frame.code, frame.message);
  const refusals = ["run_in_progress", "too_many_runs", "invalid_message", "unknown_run"];
  const rejected = refusals.includes(frame.code) ? view.rejectPending() : null;
  if (rejected != null) {
    view.cancelPreview(); // an edit or regeneration refused: its turn shows as it was
    if (!ui.message.value.trim()) ui.message.value = rejected; // the text stays to send again
    if (frame.code !== "run_in_progress") {
      setRunning(false);
      refreshActions(); // the last run's buttons come back: nothing replaced it
    }
  } else if (state.controlSent) {
    state.controlSent = false;
    if (frame.code === "invalid_message" || frame.code === "unknown_type") {
      text = "This server cannot retry or continue runs yet. Edit and resend the message instead.";
    }
    setRunning(false);
    refreshActions();
  }
  if (frame.code === "no_active_run") setRunning(false);
  if (frame.code === "not_awaiting_input") {
    hideAsk();
    if (state.lastAnswer && !ui.message.value.trim()) ui.message.value = state.lastAnswer;
  }
  note(text, "error");
  announce(text);
}

function onState(connState) {
  const labels = {
    connecting: "Connecting…", connected: "Connected", reconnecting: "Disconnected · reconnecting…",
    gone: "Conversation not found", unauthorized: "Not authorized",
  };
  ui.conn.dataset.state = connState;
  ui.conn.textContent = labels[connState] ?? connState;
  state.online = connState === "connected";
  updateControls();
  if (connState === "gone") {
    const deleted = state.deleting && state.deleting === conn.sessionId;
    state.deleting = null;
    startNewChat();
    if (!deleted) view.notice("That conversation no longer exists; a new one was started.", "warning");
  }
  if (connState === "unauthorized") view.notice("The server refused this page's token.", "error");
}

// -- the composer ------------------------------------------------------------------------------

/** What the button and Enter do now: "send", "answer" (a question is pending) or "stop". */
function mode() {
  if (banner.current) return "answer";
  if (!state.online) return "send"; // queued until the connection is back: no dead Stop button
  return state.running ? "stop" : "send";
}

function setRunning(running) {
  state.running = running;
  if (!running) state.stopping = false;
  updateControls();
  view.refreshVersions(); // no switch or edit while a run works
}

function updateControls() {
  composer.show(mode(), state.stopping);
  document.body.classList.toggle("running", state.running && state.online);
  document.body.classList.toggle("offline", !state.online);
  if (state.online && state.queued === null && composer.noteKind === "waiting") note(null);
}

/** Send `text`; with `replaces`, as a new version of that run's turn (an edit, a regeneration). */
function sendMessage(text = ui.message.value, replaces = null) {
  const content = text.trim();
  if (!content || state.queued) return;
  if (state.running && state.online) return; // Stop is the button; the text waits in the box
  const frame = composer.chatFrame(content);
  if (!frame) return;
  const tools = toolsPanel.selected();
  if (tools) frame.tools = tools;
  if (replaces) {
    frame.replaces = replaces;
    const mode = view.tree.modes.get(replaces); // the turn runs again as it ran
    if (typeof mode === "boolean") frame.agent_mode = mode;
    view.previewReplace(replaces);
  }
  note(null);
  view.hideActions();
  const run = view.expect(content);
  if (!replaces && text === ui.message.value) ui.message.value = "";
  if (!state.online || !conn.send(frame)) {
    state.queued = { frame, run };
    run.article.classList.add("queued");
    note("Not connected. Your message waits and is sent when the connection is back.", "waiting");
  } else {
    setRunning(true);
  }
  updateWelcome();
}

/** Send the message that waited for the connection, once the session is idle. */
function flushQueue() {
  const queued = state.queued;
  if (!queued || !state.online || state.running) return;
  if (!conn.send(queued.frame)) return;
  state.queued = null;
  queued.run.article.classList.remove("queued");
  note(null);
  setRunning(true);
}

function sendAnswer() {
  const content = ui.message.value;
  const pending = banner.current;
  if (!pending) return;
  if (!content.trim()) {
    note("Type your answer in the box first, or stop the run.", "info");
    ui.message.focus();
    return;
  }
  // Naming the question: a late answer is refused rather than taken for the next question.
  const frame = { type: "agent_user_input", content };
  if (pending.tool_call_id) frame.tool_call_id = pending.tool_call_id;
  if (!conn.send(frame)) {
    note("Not connected: the answer was not sent. It is still in the box.", "error");
    return;
  }
  view.noteAnswer(pending.run_id, pending.step, pending.tool_call_id, content);
  state.lastAnswer = content;
  ui.message.value = "";
  note(null);
  hideAsk();
}

function stopRun() {
  if (!state.running || state.stopping) return;
  if (!conn.send({ type: "agent_control", action: "stop" })) {
    note("Not connected: the stop could not be sent.", "error");
    return;
  }
  state.stopping = true;
  updateControls();
}

/** Retry after an error or a stop, or continue after the step limit. */
function control(action) {
  const frame = { type: "agent_control", action };
  if (action === "continue" && !composer.addMaxSteps(frame)) return;
  if (!conn.send(frame)) {
    note("Not connected: try again when the connection is back.", "error");
    return;
  }
  note(null);
  state.controlSent = true;
  view.hideActions();
  setRunning(true);
}

/** Show another version of a turn: the server answers every tab with `active_path`. */
function selectVersion(runId) {
  if (state.running) return;
  if (!conn.send({ type: "select_version", run_id: runId })) {
    note("Not connected: try again when the connection is back.", "error");
  }
}

function showPath(path) {
  view.hideActions();
  view.setPath(path);
  refreshActions(); // the last turn shown may be another
  updateWelcome();
}

view.versionActions = {
  select: selectVersion,
  send: (text, replaces) => sendMessage(text, replaces),
  running: () => state.running || state.queued !== null,
};

function refreshActions() {
  if (state.running || banner.current || state.queued) return view.hideActions();
  view.showActions({
    retry: () => control("retry"),
    resume: () => control("continue"),
    regenerate: (text) => sendMessage(text),
    edit: (text) => composer.fill(text),
  });
}

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  const current = mode();
  if (current === "answer") sendAnswer();
  else if (current === "stop") stopRun();
  else sendMessage();
});
ui.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    if (mode() === "answer") sendAnswer();
    else sendMessage();
  }
});
// Esc stops the run only from the composer: an Esc meant for the search box, a dialog or
// the drawer must never stop it.
ui.form.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || !state.running || event.defaultPrevented) return;
  if (banner.current && event.target === ui.message) return; // Esc while answering: never a stop
  event.preventDefault();
  stopRun();
});
ui.jump.addEventListener("click", () => view.scrollToEnd());
for (const example of document.querySelectorAll(".example")) {
  example.addEventListener("click", () => composer.fill(example.textContent));
}

function updateWelcome() {
  ui.welcome.hidden = !view.isEmpty || state.running;
}

// -- questions from the agent (request_input) ---------------------------------------------------

function ask(question) {
  banner.show(question);
  view.hideActions();
  updateControls();
  ui.message.focus();
  announce(`The agent asks: ${question.question}`);
}

function hideAsk() {
  if (!banner.current) return;
  banner.hide();
  updateControls();
}

function announce(text) {
  ui.announcer.textContent = text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

// -- sessions ----------------------------------------------------------------------------------

async function loadMessages(sessionId) {
  try {
    view.setHistory((await api(`api/sessions/${encodeURIComponent(sessionId)}/messages?limit=500`, token)).messages);
  } catch {
    // without it a replay shows the runs but not what the user wrote (unless events carry it)
  }
}

/** Open a stored session: render its history from the replayed events (after_seq=0). */
async function openSession(sessionId) {
  if (sessionId === conn.sessionId) return;
  resetPage();
  await loadMessages(sessionId);
  conn.open(sessionId, 0);
  chats.render();
  ui.message.focus();
}

function startNewChat() {
  resetPage();
  conn.open(null);
  chats.render();
  drawer.close(false);
  ui.message.focus();
}

function resetPage() {
  view.clear();
  hideAsk();
  note(null);
  state.queued = null;
  state.controlSent = false;
  setRunning(false);
  state.sessionLastSeq = 0;
  composer.resetMaxSteps(); // max steps belongs to one chat
  updateWelcome();
}

$("new-chat").addEventListener("click", startNewChat);
$("ask-stop").addEventListener("click", stopRun);
$("new-chat-top").addEventListener("click", startNewChat);

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
  updateWelcome();
  conn.open(saved.sessionId, saved.lastSeq);
}

/** Whom this tab's token names, always in view; a sign-in link (`?token=`) says so at once:
 * a link someone else made would otherwise put what you write into their account. */
async function showIdentity() {
  let me;
  try {
    me = await api("api/me", token);
  } catch {
    return; // unauthorized or offline: the connection line says so
  }
  showModel(me.model);
  if (!me.auth) return;
  $("identity-name").textContent = `Signed in as ${me.user_id} (${me.tenant_id})`;
  $("identity").hidden = false;
  if (fromLink && !ui.message.value) {
    note(
      `You opened a sign-in link for ${me.user_id} (${me.tenant_id}): what you write here ` +
        "is saved to that account. Not you? Sign out (bottom of the chat list).",
      "info",
    );
  }
}

/** The bundled small model (a first run without any model configured) is named on the
 * welcome screen, with how to use a real one: its answers are often wrong. */
function showModel(model) {
  bundledModel = Boolean(model?.bundled);
  describeModel();
}

function describeModel() {
  ui.welcomeModel.textContent = bundledModel
    ? "This server runs its bundled small local model, for trying things out: it often gets " +
      "answers wrong. To use a real model, start the server with OPENAI_API_KEY, or with " +
      "OPENAI_BASE_URL and AGENT__LLM__MODEL (docs/models.md)."
    : sessionModel && `Model: ${sessionModel}`;
  ui.welcomeModel.hidden = !ui.welcomeModel.textContent;
}

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem("agent-chat:token");
  location.replace(location.pathname);
});

setRunning(false);
updateWelcome();
showIdentity();
const saved = loadSaved();
if (saved?.sessionId) resume(saved);
else conn.open(null);
ui.message.focus();
