// Drives Gemini CLI's own core (@google/gemini-cli-core from npm): `connectToMcpServer` and
// `discoverTools` with the README's settings.json server entry, then a dependent pair of calls
// the way Gemini's model sends them (with the `wait_for_previous` that Gemini adds to every tool)
// through each tool's own `build()` (schema validation) and `execute()`.
//
// Usage: node gemini_driver.mjs NODE_MODULES SERVER_CONFIG_JSON. Prints one JSON object per step.
// The few objects Gemini's core asks of its caller (config, workspace, message bus) are minimal:
// a trusted folder (the README says how to trust one), no sanitisation settings, no roots.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeModules, serverJson] = process.argv.slice(2);
const core = await import(pathToFileURL(join(nodeModules, '@google/gemini-cli-core', 'dist', 'index.js')).href);
const server = JSON.parse(serverJson);
const emit = (step, result) => process.stdout.write(JSON.stringify({ step, result }) + '\n');

const diagnostics = [];
const cliConfig = {
  emitMcpDiagnostic: (level, message) => diagnostics.push(`${level}: ${message}`),
  sanitizationConfig: {},
  isTrustedFolder: () => true,
  setUserInteractedWithMcp: () => {},
  getPolicyEngine: () => undefined,
};
const workspace = { getDirectories: () => [process.cwd()], onDirectoriesChanged: () => () => {} };
const messageBus = { subscribe: () => {}, unsubscribe: () => {}, publish: async () => {} };

const client = await core.connectToMcpServer('0.61.0', 'rl', server, false, workspace, cliConfig);
try {
  const tools = await core.discoverTools('rl', server, client, cliConfig, messageBus, { timeout: server.timeout });
  const byName = new Map(tools.map((t) => [t.serverToolName, t]));
  const schema = byName.get('rl_list_environments').getSchema();
  emit('discovery', {
    tools: tools.map((t) => t.serverToolName).sort(),
    names: tools.map((t) => t.name).sort(),
    wait_for_previous_added: 'wait_for_previous' in (schema.parametersJsonSchema.properties ?? {}),
  });
  const run = async (step, tool, params) => {
    const invocation = byName.get(tool).build(params);
    const result = await invocation.execute({ abortSignal: new AbortController().signal });
    emit(step, { error: result.error ?? null, llmContent: result.llmContent });
  };
  await run('list', 'rl_list_environments', { wait_for_previous: false });
  await run('select', 'rl_select_environment', { name: 'arithmetic', wait_for_previous: true });
  await run('config', 'rl_get_current_config', { wait_for_previous: true });
} finally {
  await client.close();
  emit('diagnostics', diagnostics);
}
