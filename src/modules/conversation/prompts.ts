import type { ChatMessage, ContextPassage } from '../../providers/llm/types.js';

/**
 * The three system-prompt generators of the Q&A endpoints. Each is a pure function of one context:
 * same context, same messages. They differ in how they frame the assistant, not in what they are
 * told: every generator uses the assistant's instructions, the institution's AI name and purpose,
 * the user's date, time zone and location, memory parameters, earlier turns and retrieved passages.
 */
export type PromptMode = 'classic' | 'soul' | 'soul-v2';
export const PROMPT_MODES: readonly PromptMode[] = ['classic', 'soul', 'soul-v2'];

export interface PromptPassage {
  text: string;
  /** Where it comes from (file title or name, and chunk number). */
  source: string;
}

export interface PromptContext {
  assistant: { name: string; instructions: string; arguments: string[] } | null;
  institution: { name: string; ainame: string; about: string } | null;
  user: { name: string; isoDate: string; timezone: string; location: string };
  memory: Array<{ key: string; value: string; description?: string }>;
  /** Earlier turns, oldest first. */
  history: Array<{ input: string; output: string }>;
  passages: PromptPassage[];
  question: string;
  /** Answer only from the passages (and say so when there are none). */
  ragOnly: boolean;
  /** Retrieval was skipped on purpose. */
  ragIgnore: boolean;
  /** Names of the tools the model may call. */
  tools: string[];
}

export interface Prompt {
  messages: ChatMessage[];
  /** The passages as the local model consumes them (numbered in the same order as in the prompt). */
  context: ContextPassage[];
}

/** The user's local date and time, e.g. "Monday, 23 November 2026, 10:15 (Europe/Berlin)". */
export function localDateTime(isoDate: string, timezone: string): string {
  const date = new Date(isoDate);
  if (Number.isNaN(date.getTime())) return `${isoDate} (${timezone})`;
  const text = new Intl.DateTimeFormat('en-GB', { timeZone: timezone, weekday: 'long', day: 'numeric', month: 'long', year: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false }).format(date);
  return `${text} (${timezone})`;
}

function passagesBlock(passages: PromptPassage[]): string {
  return passages.map((p, i) => `[${i + 1}] (${p.source})\n${p.text.trim()}`).join('\n\n');
}

function memoryBlock(memory: PromptContext['memory']): string {
  return memory.map((m) => `- ${m.key}: ${m.value}${m.description ? ` (${m.description})` : ''}`).join('\n');
}

function groundingRules(ctx: PromptContext): string[] {
  const rules: string[] = [];
  if (ctx.ragOnly) {
    rules.push(
      ctx.passages.length > 0
        ? 'Answer ONLY from the numbered passages below. If they do not contain the answer, say that the documents do not cover it. Cite passages as [n].'
        : 'You must answer only from the user\'s documents, and no passage matched this question: say plainly that the documents do not cover it, and do not answer from general knowledge.',
    );
  } else if (ctx.passages.length > 0) {
    rules.push('Prefer the numbered passages below when they are relevant and cite them as [n]; say so when you answer beyond them.');
  } else if (!ctx.ragIgnore) {
    rules.push('No passage of the user\'s documents matched this question.');
  }
  if (ctx.tools.length > 0) rules.push(`You may call these tools when they help: ${ctx.tools.join(', ')}.`);
  return rules;
}

function turns(ctx: PromptContext): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const t of ctx.history) {
    out.push({ role: 'user', content: t.input });
    out.push({ role: 'assistant', content: t.output });
  }
  out.push({ role: 'user', content: ctx.question });
  return out;
}

function assemble(system: string[], ctx: PromptContext): Prompt {
  const sections = system.filter((s) => s.trim() !== '');
  if (ctx.passages.length > 0) sections.push(`Passages from the user's documents:\n${passagesBlock(ctx.passages)}`);
  return {
    messages: [{ role: 'system', content: sections.join('\n\n') }, ...turns(ctx)],
    context: ctx.passages.map((p) => ({ text: p.text, source: p.source })),
  };
}

const aiName = (ctx: PromptContext) => ctx.institution?.ainame || ctx.assistant?.name || 'the assistant';

function assistantLines(ctx: PromptContext): string[] {
  if (!ctx.assistant) return [];
  const args = ctx.assistant.arguments.filter((a) => a.trim() !== '');
  return [
    `Assistant "${ctx.assistant.name}" instructions:\n${ctx.assistant.instructions.trim() || '(none)'}`,
    ...(args.length ? [`Assistant arguments:\n${args.map((a, i) => `${i + 1}. ${a}`).join('\n')}`] : []),
  ];
}

function userLines(ctx: PromptContext): string[] {
  return [
    `The user${ctx.user.name ? `, ${ctx.user.name},` : ''} is asking on ${localDateTime(ctx.user.isoDate, ctx.user.timezone)}.`,
    ctx.user.location ? `The user's location: ${ctx.user.location}.` : '',
  ];
}

/** classic (/api/ai/personal/qanda): a plain, factual assistant prompt. */
export function classicPrompt(ctx: PromptContext): Prompt {
  return assemble(
    [
      `You are ${aiName(ctx)}, an AI assistant${ctx.institution ? ` of ${ctx.institution.name}` : ''}.${ctx.institution?.about ? ` ${ctx.institution.about}` : ''}`,
      ...userLines(ctx),
      ...assistantLines(ctx),
      ctx.memory.length ? `Facts to remember (memory parameters):\n${memoryBlock(ctx.memory)}` : '',
      ...groundingRules(ctx),
      'Answer clearly and concisely.',
    ],
    ctx,
  );
}

/** soul (/api/ai/experimental/personal/qanda): the AI speaks as the institution's persona, in the first person. */
export function soulPrompt(ctx: PromptContext): Prompt {
  return assemble(
    [
      `# Who you are\nYou are ${aiName(ctx)}. Speak in the first person as ${aiName(ctx)}, warmly and with a consistent personality.` +
        (ctx.institution ? ` You are the digital twin of ${ctx.institution.name}.` : '') +
        (ctx.institution?.about ? `\nYour purpose: ${ctx.institution.about}` : ''),
      `# The person you talk to\n${userLines(ctx).filter(Boolean).join('\n')}`,
      ctx.memory.length ? `# What you remember\n${memoryBlock(ctx.memory)}` : '',
      ctx.assistant ? `# Your role in this conversation\n${assistantLines(ctx).join('\n\n')}` : '',
      `# How you answer\n${groundingRules(ctx).concat('Stay in character; never invent facts about the user or the documents.').join('\n')}`,
    ],
    ctx,
  );
}

/**
 * soul-v2 (/api/ai/experimental/personal/qanda-v2): the persona prompt with an explicit reasoning
 * order (understand, check memory and passages, answer, cite) and the continuity of the thread.
 */
export function soulV2Prompt(ctx: PromptContext): Prompt {
  return assemble(
    [
      `<persona>\nYou are ${aiName(ctx)}${ctx.institution ? `, the digital twin of ${ctx.institution.name}` : ''}. Speak in the first person.` +
        (ctx.institution?.about ? `\nPurpose: ${ctx.institution.about}` : '') +
        '\n</persona>',
      `<user>\n${userLines(ctx).filter(Boolean).join('\n')}\n</user>`,
      ctx.memory.length ? `<memory>\n${memoryBlock(ctx.memory)}\n</memory>` : '',
      ctx.assistant ? `<assistant_role>\n${assistantLines(ctx).join('\n\n')}\n</assistant_role>` : '',
      ctx.history.length ? `<continuity>\nThis is turn ${ctx.history.length + 1} of the conversation: build on what was said before, do not repeat it.\n</continuity>` : '',
      `<method>\n1. Understand what the user needs.\n2. Check memory and the passages for what applies.\n3. Answer in character.\n4. Cite passages as [n].\n${groundingRules(ctx).join('\n')}\n</method>`,
    ],
    ctx,
  );
}

export const PROMPT_GENERATORS: Record<PromptMode, (ctx: PromptContext) => Prompt> = {
  classic: classicPrompt,
  soul: soulPrompt,
  'soul-v2': soulV2Prompt,
};
