import type { ToolDefinition } from '../../providers/llm/types.js';
import { localDateTime } from './prompts.js';

/** The model-callable tools (function calling on openai-compatible providers). */
export const TOOL_NAMES = ['vault_search', 'memory_lookup', 'current_datetime'] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

const BASE_TOOLS: Record<ToolName, ToolDefinition> = {
  vault_search: {
    name: 'vault_search',
    description: "Search the user's documents (their vault) for passages about a query. Returns numbered passages with their sources.",
    parameters: {
      type: 'object',
      properties: { query: { type: 'string', description: 'What to look for' }, limit: { type: 'integer', minimum: 1, maximum: 10 } },
      required: ['query'],
      additionalProperties: false,
    },
  },
  memory_lookup: {
    name: 'memory_lookup',
    description: 'Look up remembered facts (memory parameters) of the user and the institution, optionally only those whose key or value contains a term.',
    parameters: { type: 'object', properties: { term: { type: 'string' } }, additionalProperties: false },
  },
  current_datetime: {
    name: 'current_datetime',
    description: "The current date and time in the user's time zone (or another IANA time zone).",
    parameters: { type: 'object', properties: { timezone: { type: 'string', description: 'IANA time zone name' } }, additionalProperties: false },
  },
};

export interface ToolSelection {
  /** all | selected | none (the assistant's assistantToolMode). */
  mode: string;
  tools: Array<{ tool: string; instructionsOverride: string }>;
  /** The institution's toolsDisabled. */
  disabled: readonly string[];
}

/**
 * The tools offered to the model: all of them (`all`), the assistant's list (`selected`) or none;
 * an `instructionsOverride` replaces a tool's description; the institution's toolsDisabled removes tools.
 */
export function selectTools(selection: ToolSelection): ToolDefinition[] {
  const overrides = new Map(selection.tools.map((t) => [t.tool, t.instructionsOverride]));
  const names: ToolName[] =
    selection.mode === 'all' ? [...TOOL_NAMES] : selection.mode === 'selected' ? TOOL_NAMES.filter((n) => overrides.has(n)) : [];
  return names
    .filter((n) => !selection.disabled.includes(n))
    .map((n) => {
      const override = overrides.get(n)?.trim();
      return override ? { ...BASE_TOOLS[n], description: override } : BASE_TOOLS[n];
    });
}

export interface ToolRuntime {
  /**
   * The tools offered to the model in the call that asked for this one: a call of any other tool (one the
   * assistant's `selected` list or the institution's toolsDisabled left out, which a model may still name)
   * is not run.
   */
  offered: readonly string[];
  search(query: string, limit: number): Promise<Array<{ text: string; source: string }>>;
  memory(): Promise<Array<{ key: string; value: string; description?: string }>>;
  now(): Date;
  timezone: string;
}

/** Longest tool response handed back to the model. */
const MAX_TOOL_RESPONSE = 8000;

/**
 * Tool calls of one model message that run. A provider (or a model steered by a crafted document) can ask for
 * thousands at once: each would run (a vault search each), be sent back in the next call and kept on the record.
 * The calls beyond are not run nor sent back; the model is told so (tooManyToolCallsNote).
 */
export const MAX_TOOL_CALLS_PER_ROUND = 16;

/** Added to the last tool response of a turn whose calls were cut to MAX_TOOL_CALLS_PER_ROUND: what the model is told of the rest. */
export const tooManyToolCallsNote = (asked: number) =>
  `Error: too many tool calls: you asked for ${asked} in one turn and only the first ${MAX_TOOL_CALLS_PER_ROUND} were run (the others were not); ask for at most ${MAX_TOOL_CALLS_PER_ROUND} at a time.`;

const isTimeZone = (tz: string) => {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
};

/** Runs one tool call of an offered tool; bad arguments, or a tool not offered, give an error text for the model, never an exception. */
export async function runTool(name: string, rawArguments: string, runtime: ToolRuntime): Promise<string> {
  if (!(TOOL_NAMES as readonly string[]).includes(name)) return `Error: unknown tool ${name}`;
  if (!runtime.offered.includes(name)) return `Error: tool ${name} is not available`;
  let args: Record<string, unknown> = {};
  try {
    const parsed = rawArguments.trim() ? (JSON.parse(rawArguments) as unknown) : {};
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) args = parsed as Record<string, unknown>;
    else return 'Error: the arguments must be a JSON object';
  } catch {
    return 'Error: the arguments are not valid JSON';
  }
  let out: string;
  switch (name) {
    case 'vault_search': {
      const query = typeof args.query === 'string' ? args.query.slice(0, 500) : '';
      if (!query.trim()) return 'Error: query is required';
      const limit = typeof args.limit === 'number' && Number.isInteger(args.limit) ? Math.min(10, Math.max(1, args.limit)) : 5;
      const hits = await runtime.search(query, limit);
      out = hits.length ? hits.map((h, i) => `[${i + 1}] (${h.source}) ${h.text}`).join('\n\n') : 'No passage of the documents matched.';
      break;
    }
    case 'memory_lookup': {
      const term = typeof args.term === 'string' ? args.term.toLowerCase() : '';
      const rows = (await runtime.memory()).filter((m) => !term || m.key.toLowerCase().includes(term) || m.value.toLowerCase().includes(term));
      out = rows.length ? rows.map((m) => `${m.key}: ${m.value}`).join('\n') : 'No memory parameter matched.';
      break;
    }
    case 'current_datetime': {
      const tz = typeof args.timezone === 'string' && isTimeZone(args.timezone) ? args.timezone : runtime.timezone;
      const now = runtime.now();
      out = `${localDateTime(now.toISOString(), tz)}; ISO ${now.toISOString()}`;
      break;
    }
    default:
      return `Error: unknown tool ${name}`;
  }
  return out.length > MAX_TOOL_RESPONSE ? `${out.slice(0, MAX_TOOL_RESPONSE)}…` : out;
}
