// An AG-UI front end nobody here wrote: @ag-ui/client's HttpAgent, run against agent-server.
// Usage: node client.mjs <npm dir> <url> <threadId> <question> <answer>
// Runs the task, subscribes to every event, answers the interrupt by resuming, and checks each
// event with @ag-ui/core's schemas (HttpAgent.runAgent also applies the SDK's verifyEvents,
// which throws on any out-of-order event). Prints one JSON report; exits 1 on any rejection.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, url, threadId, question, answer] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(npmDir, "node_modules", p)).href);
const { HttpAgent } = await load("@ag-ui/client/dist/index.mjs");
const { EventSchemas } = await load("@ag-ui/core/dist/schemas.mjs");

const events = [];
const rejected = [];
const agent = new HttpAgent({
  url,
  threadId,
  initialMessages: [{ id: "m1", role: "user", content: question }],
});
const subscriber = {
  onEvent({ event }) {
    const checked = EventSchemas.safeParse(event);
    if (!checked.success) rejected.push({ type: event.type, error: checked.error.message });
    events.push(event);
  },
};
const runs = [];
try {
  await agent.runAgent({}, subscriber);
  runs.push(events.length);
  const interrupts = agent.pendingInterrupts.map((i) => ({ ...i }));
  const resume = interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: answer }));
  await agent.runAgent({ resume }, subscriber);
  runs.push(events.length);
  console.log(JSON.stringify({ ok: rejected.length === 0, events, rejected, runs, interrupts,
    messages: agent.messages }));
  process.exit(rejected.length === 0 ? 0 : 1);
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.stack || error), events, rejected }));
  process.exit(1);
}
