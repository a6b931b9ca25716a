// An AG-UI front end nobody here wrote: @ag-ui/client's HttpAgent, run against agent-server.
// Usage: node client.mjs <npm dir> <url> <threadId> <question> <answer> [tools JSON]
// Runs the task and subscribes to every event. While a run ends with an interrupt, it resumes
// with <answer>; while one ends with frontend tool calls pending, it adds their results
// ("<answer>") as tool messages and runs again, as an application would. Each event is checked
// with @ag-ui/core's schemas; HttpAgent.runAgent also applies the SDK's verifyEvents, which
// throws on any event out of order. Prints one JSON report; exits 1 on any rejection.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, url, threadId, question, answer, toolsJson] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(npmDir, "node_modules", p)).href);
const { HttpAgent } = await load("@ag-ui/client/dist/index.mjs");
const { EventSchemas } = await load("@ag-ui/core/dist/schemas.mjs");

const tools = JSON.parse(toolsJson || "[]");
const events = [];
const rejected = [];
const runs = [];
const interrupts = [];
let pending = [];
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
  onRunFinishedEvent(params) {
    pending = params.outcome === "success" ? params.pendingToolCallIds : [];
  },
};
try {
  let parameters = { tools };
  for (let i = 0; i < 4; i++) {
    pending = [];
    await agent.runAgent(parameters, subscriber);
    runs.push(events.length);
    if (agent.pendingInterrupts.length) {
      interrupts.push(...agent.pendingInterrupts.map((x) => ({ ...x })));
      const resume = agent.pendingInterrupts.map((x) => ({
        interruptId: x.id, status: "resolved", payload: answer,
      }));
      parameters = { tools, resume };
    } else if (pending.length) {
      for (const id of pending) {
        agent.addMessage({ id: `result-${id}`, role: "tool", toolCallId: id, content: answer });
      }
      parameters = { tools };
    } else {
      break;
    }
  }
  const ok = rejected.length === 0;
  console.log(JSON.stringify({ ok, events, rejected, runs, interrupts, messages: agent.messages }));
  process.exit(ok ? 0 : 1);
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.stack || error), events, rejected }));
  process.exit(1);
}
