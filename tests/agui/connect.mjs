// Reconnect with @ag-ui/client: an HttpAgent whose `connect` posts to /agui/connect (the SDK's
// HttpAgent leaves `connect` to the application), then `connectAgent` as a reloaded page would.
// Usage: node connect.mjs <npm dir> <url of /agui> <threadId>
// Prints one JSON report: the events (each checked with @ag-ui/core's schemas; connectAgent
// applies the SDK's verifyEvents too) and the agent's messages after it.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, url, threadId] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(npmDir, "node_modules", p)).href);
const { HttpAgent, runHttpRequest, transformHttpEventStream, enforceOutgoingInput } = await load(
  "@ag-ui/client/dist/index.mjs",
);
const { EventSchemas } = await load("@ag-ui/core/dist/schemas.mjs");

class ReconnectingAgent extends HttpAgent {
  connect(input) {
    const init = this.requestInit(enforceOutgoingInput(input));
    return transformHttpEventStream(
      runHttpRequest(() => this.fetch(`${url}/connect`, init)),
      this.debugLogger,
    );
  }
}

const events = [];
const rejected = [];
const agent = new ReconnectingAgent({ url, threadId });
try {
  await agent.connectAgent({}, {
    onEvent({ event }) {
      const checked = EventSchemas.safeParse(event);
      if (!checked.success) rejected.push({ type: event.type, error: checked.error.message });
      events.push(event);
    },
  });
  const ok = rejected.length === 0;
  console.log(JSON.stringify({ ok, events, rejected, messages: agent.messages }));
  process.exit(ok ? 0 : 1);
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.stack || error), events, rejected }));
  process.exit(1);
}
