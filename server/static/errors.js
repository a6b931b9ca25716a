// Server errors in plain words: no codes, no field names. The server's own message is kept
// only where it already reads as a sentence for people (a failed model call says why).

const FIELD_PREFIX = /^[a-z_]+(?:\.[a-z_]+)*: /; // "agent_max_steps: must be at most 50 (got 60)."

const PLAIN = {
  run_in_progress: "The agent is still working on this chat. Wait for it, or stop it, then send again.",
  too_many_runs: "Too many chats are running at once right now. Try again in a moment.",
  no_active_run: "Nothing is running any more.",
  not_awaiting_input: "The agent is no longer waiting for an answer.",
  nothing_to_retry: "There is nothing to retry or continue here.",
  unknown_run: "That version is no longer in this chat. Reload the page to see the chat as it is now.",
  invalid_json: "The page sent something the server could not read. Reload the page.",
  unknown_type: "The server does not know this action. It may be older than this page.",
  storage_error: "The server could not save this conversation. Try again shortly.",
  internal_error: "Something went wrong on the server.",
};

/** One sentence (or two) for people, for an error `code` and the server's `message`. */
export function plainError(code, message = "") {
  const text = String(message).replace(FIELD_PREFIX, "").trim();
  if (code === "invalid_message") {
    const limit = text.match(/at most (\d+)/);
    if (limit) return `Max steps can be at most ${limit[1]}. Lower it and send again.`;
    return "The server did not accept this message. Check the settings and send again.";
  }
  if (code === "llm_error") return modelError(text);
  if (code === "internal_error" && /time limit/.test(text)) return sentence(text);
  return PLAIN[code] ?? (text ? sentence(text) : "Something went wrong.");
}

function modelError(text) {
  const status = Number(text.match(/HTTP (\d{3})/)?.[1]);
  let why = "the model service had a problem";
  if (status === 429) why = "the model service is overloaded right now";
  else if ([502, 503, 504].includes(status)) why = "the model service is unavailable right now";
  else if (status === 401 || status === 403) why = "the model service refused the server's key";
  else if (/could not be reached/.test(text)) why = "the model service could not be reached";
  else if (/broke off|could not be read/.test(text)) why = "its reply broke off";
  // The model server's own reason, when the server passed it on ("model x does not exist").
  const reason = text.match(/\(HTTP \d{3}\): (.+)$/)?.[1];
  const said = reason ? ` It said: “${sentence(reason).replace(/”/g, "\"")}”` : "";
  return `The model could not answer: ${why}.${said}`;
}

function sentence(text) {
  const clean = text.replace(/\s*\((?:code|status)[^)]*\)\s*$/i, "");
  return /[.!?…]$/.test(clean) ? clean : `${clean}.`;
}
