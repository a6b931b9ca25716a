// The composer's controls: the message box, the Send / Stop / Answer button, the note under
// the box, and the run settings (agent mode, remembered; max steps, which belongs to a chat).

const PREFS = "agent-chat:prefs";
const DEFAULT_MAX_STEPS = 10;
// A touch screen has no Esc and no Shift+Enter: its placeholders do not speak of keys.
const TOUCH = matchMedia("(pointer: coarse)").matches;
const KEYS = TOUCH ? "" : " (Enter to send, Shift+Enter for a new line, Esc to stop)";
const LOOK = {
  send: { label: "Send", aria: "Send (Enter)", box: "Message", placeholder: `Message the agent…${KEYS}` },
  answer: { label: "Answer", aria: "Send the answer (Enter)", box: "Your answer to the agent's question",
    placeholder: `Answer the agent's question…${TOUCH ? "" : " (Enter to send)"}` },
  stop: { label: "Stop", aria: "Stop the run (Esc)", box: "Message", placeholder: `Message the agent…${KEYS}` },
};

export class Composer {
  constructor({ box, label, button, note, agentMode, maxSteps }) {
    Object.assign(this, { box, label, button, noteNode: note, agentMode, maxSteps });
    this.defaults = {};
    agentMode.addEventListener("change", () => {
      maxSteps.disabled = !agentMode.checked;
      localStorage.setItem(PREFS, JSON.stringify({ agentMode: agentMode.checked }));
    });
    maxSteps.addEventListener("change", () => (maxSteps.dataset.touched = "1"));
    try {
      const prefs = JSON.parse(localStorage.getItem(PREFS) ?? "{}") ?? {};
      if (typeof prefs.agentMode === "boolean") agentMode.checked = prefs.agentMode;
    } catch {
      localStorage.removeItem(PREFS);
    }
    maxSteps.disabled = !agentMode.checked;
    this.resetMaxSteps();
  }

  /** Show what the button and Enter do: "send", "answer" or "stop" (`stopping`: sent). */
  show(mode, stopping = false) {
    const look = LOOK[mode];
    this.button.textContent = mode === "stop" && stopping ? "Stopping…" : look.label;
    this.button.classList.toggle("stop", mode === "stop");
    this.button.disabled = mode === "stop" && stopping;
    this.button.setAttribute("aria-label", look.aria);
    this.box.placeholder = look.placeholder;
    this.label.textContent = look.box;
  }

  /** A line under the box; `kind` "error", "waiting" or "info"; null hides it. */
  note(text, kind = "info") {
    this.noteNode.hidden = !text;
    this.noteNode.textContent = text ?? "";
    this.noteNode.dataset.kind = text ? kind : "";
  }

  get noteKind() {
    return this.noteNode.dataset.kind;
  }

  /** A chat frame for `content` with the current settings; null (and a note) if invalid. */
  chatFrame(content) {
    const frame = { type: "chat", content, agent_mode: this.agentMode.checked };
    return this.addMaxSteps(frame) ? frame : null;
  }

  /** Add `agent_max_steps` when it was changed for this chat; false when it is not valid. */
  addMaxSteps(frame) {
    if (!this.agentMode.checked || !this.maxSteps.dataset.touched) return true;
    const steps = Number(this.maxSteps.value);
    if (!Number.isInteger(steps) || steps < 1) {
      this.note("Max steps must be a whole number of at least 1.", "error");
      this.maxSteps.focus();
      return false;
    }
    frame.agent_max_steps = steps;
    return true;
  }

  /** The server's defaults (the session frame's `defaults`), applied if untouched. */
  setDefaults(defaults) {
    this.defaults = defaults ?? this.defaults;
    if (this.defaults.max_steps_limit) this.maxSteps.max = this.defaults.max_steps_limit;
    if (!this.maxSteps.dataset.touched) this.maxSteps.value = this.defaults.max_steps ?? DEFAULT_MAX_STEPS;
  }

  /** A new or other chat: max steps back to the server's default. */
  resetMaxSteps() {
    delete this.maxSteps.dataset.touched;
    this.setDefaults(null);
  }

  /** Put `text` in the box, ready to edit. */
  fill(text) {
    this.box.value = text;
    this.box.focus();
    this.box.setSelectionRange(text.length, text.length);
  }
}
