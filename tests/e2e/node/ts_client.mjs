// One agent through the TypeScript SDK client (@modelcontextprotocol/sdk), over Streamable HTTP.
//   node ts_client.mjs URL [BEARER_TOKEN]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: 'macp-e2e-ts', version: '0.0.1' });

function check(cond, what) {
  if (!cond) {
    console.error(`TS CLIENT FAILED: ${what}`);
    process.exit(1);
  }
}

async function call(name, args) {
  const r = await client.callTool({ name, arguments: args });
  check(!r.isError, `${name} failed: ${r.content?.[0]?.text}`);
  check(r.structuredContent, `${name} returned no structured content`);
  return r.structuredContent;
}

await client.connect(transport);
const { tools } = await client.listTools();
check(tools.length >= 15 && tools.every((t) => t.description && t.outputSchema), 'tools carry descriptions and output schemas');
const room = await call('create_room', { objective: 'TypeScript client check', name: 'ts' });
const me = await call('join_room', { room_id: room.room_id, agent_id: 'ts-agent', agent_type: 'typescript-sdk' });
const posted = await call('post_finding', { room_id: room.room_id, content: 'Posted through the TypeScript SDK client.', tags: ['triage'] });
check(posted.finding.agent_id === 'ts-agent', 'the post acts as the joined agent');
const updates = await call('get_updates', { room_id: room.room_id });
check(updates.findings.length === 1 && updates.findings[0].finding_id === posted.finding.finding_id, 'updates return the post');
const bad = await client.callTool({ name: 'get_room_summary', arguments: { room_id: '00000000-0000-4000-8000-000000000000' } });
check(bad.isError === true && bad.structuredContent?.error?.code === 'not_found', 'errors are tool errors with a code');
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ ok: true, user_id: me.user_id, finding: posted.finding.finding_id }));
