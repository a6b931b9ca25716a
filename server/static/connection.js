// The WebSocket to /ws and the HTTP API, with the caller's token. The socket reconnects by
// itself after a drop, resuming with `session_id` and `after_seq` = the last seq seen, so the
// page misses nothing and sees nothing twice. Session id and last seq survive a reload in
// sessionStorage (per tab).

const SAVED = "agent-chat:session";
const BACKOFF_MS = [250, 500, 1000, 2000, 4000];
const base = new URL(".", location.href);

export class HttpError extends Error {
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.code ?? null;
  }
}

/** Call a path of the HTTP API (relative to the page); GET unless `method`; JSON both ways. */
export async function api(path, token, { method = "GET", body: payload } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const init = { method, headers };
  if (payload !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  const response = await fetch(new URL(path, base), init);
  const body = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new HttpError(response.status, body);
  return body;
}

export function loadSaved() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SAVED) ?? "null");
    return saved && typeof saved.sessionId === "string" ? saved : null;
  } catch {
    return null;
  }
}

/**
 * One logical connection to one session. `onFrame(frame)` gets every frame once, in order;
 * `onState(state, detail)` gets "connecting" | "connected" | "reconnecting" | "gone" |
 * "unauthorized".
 */
export class Connection {
  constructor({ token, onFrame, onState }) {
    this.token = token;
    this.onFrame = onFrame;
    this.onState = onState;
    this.ws = null;
    this.sessionId = null;
    this.lastSeq = 0;
    this.generation = 0;
    this.attempt = 0;
    this.timer = null;
    addEventListener("online", () => this.retryNow());
  }

  /** Attach to `sessionId` (null: a new session), replaying events after `afterSeq`. */
  open(sessionId, afterSeq = 0) {
    this.sessionId = sessionId;
    this.lastSeq = afterSeq;
    this.attempt = 0;
    this.save();
    this.connect("connecting");
  }

  get isOpen() {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  send(frame) {
    if (!this.isOpen) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  retryNow() {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
      this.connect("reconnecting");
    }
  }

  connect(state) {
    clearTimeout(this.timer);
    this.timer = null;
    const generation = ++this.generation;
    this.ws?.close();
    const url = new URL("ws", base);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    if (this.sessionId) {
      url.searchParams.set("session_id", this.sessionId);
      url.searchParams.set("after_seq", String(this.lastSeq));
    }
    this.onState(state);
    // The token rides in a subprotocol, never in the URL (access logs, proxies, history).
    const protocols = this.token ? ["agent-server", bearerProtocol(this.token)] : [];
    const ws = (this.ws = new WebSocket(url, protocols));
    const current = () => generation === this.generation;
    ws.onmessage = (event) => current() && this.receive(JSON.parse(event.data));
    ws.onclose = (event) => current() && this.closed(event.code);
  }

  receive(frame) {
    if (frame.type === "session") {
      this.attempt = 0;
      this.sessionId = frame.session_id;
      this.save();
      this.onState("connected");
    } else if (typeof frame.seq === "number") {
      if (frame.seq <= this.lastSeq) return; // already shown
      this.lastSeq = frame.seq;
      this.save();
    }
    this.onFrame(frame);
  }

  async closed(code) {
    this.ws = null;
    if (code === 4404) return this.onState("gone");
    const generation = this.generation;
    const refused = code === 4401 || (code === 1006 && (await this.refused()));
    if (generation !== this.generation) return; // opened again meanwhile (another chat)
    if (refused) return this.onState("unauthorized");
    const delay = BACKOFF_MS[Math.min(this.attempt++, BACKOFF_MS.length - 1)];
    this.onState("reconnecting");
    this.timer = setTimeout(() => this.connect("reconnecting"), delay);
  }

  /** A handshake the server refused shows only as 1006 in a browser: ask the HTTP API
   * whether this token (or none) is let in, rather than reconnect forever. */
  async refused() {
    try {
      await api("api/me", this.token);
      return false;
    } catch (error) {
      return error instanceof HttpError && error.status === 401;
    }
  }

  save() {
    sessionStorage.setItem(SAVED, JSON.stringify({ sessionId: this.sessionId, lastSeq: this.lastSeq }));
  }
}

// `agent-server.bearer.<base64url(token)>`: docs/wire-protocol.md, "Security additions".
function bearerProtocol(token) {
  const b64 = btoa(String.fromCharCode(...new TextEncoder().encode(token)));
  return `agent-server.bearer.${b64.replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "")}`;
}
