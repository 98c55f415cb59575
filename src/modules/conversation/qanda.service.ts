import type { AppContext } from '../../context.js';
import { isForeignKeyViolation } from '../../db/errors.js';
import { ClaimLostError, type KeyedRequest } from '../../platform/idempotency.js';
import { countInputTokens, countTextTokens, loadEncoding } from '../../providers/llm/tokens.js';
import { UpstreamError, type ChatMessage, type ChatRequest, type ChatResult, type TokenUsage, type ToolCall } from '../../providers/llm/types.js';
import { AppError, badField, contentBlocked, forbidden, insufficientCredits, notFound, upstreamFailed } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { AuthContext } from '../identity/auth-context.js';
import type { RealtimeGateway, StreamSink } from '../realtime/gateway.js';
import { retrieve } from '../search/retrieve.js';
import * as assistantsRepo from './assistants.repository.js';
import { ContentFilter } from './content-filter.js';
import { actingIn, assertUseAssistant } from './conversation.policy.js';
import { extendReservation, payerExists, releaseReservation, ReservationClosedError, reserveCredits, settleCredits, type Payer } from './credits.repository.js';
import * as historiesRepo from './histories.repository.js';
import { loadMemoryParameters } from './memory.js';
import { chargeUnits, exactCostOfUsage, maxCostUnits, priceFor, toCredits } from './pricing.js';
import { PROMPT_GENERATORS, type PromptContext, type PromptMode, type PromptPassage } from './prompts.js';
import type { QandaInput, QandaResult } from './qanda.schemas.js';
import { MAX_TOOL_CALLS_PER_ROUND, runTool, selectTools, tooManyToolCallsNote } from './tools.js';

/** Passages retrieved for a question. */
const RETRIEVAL_LIMIT = 6;
/** Dense-only passages below this cosine are not evidence for an answer (see `search` below). */
const QA_DENSE_FLOOR = 0.5;
/** Earlier turns of a thread when no assistant says how many. */
const DEFAULT_HISTORY_COUNT = 5;
/** Model calls after the first one that answer tool calls. */
const MAX_TOOL_ROUNDS = 3;
/** Completion budget when the institution sets none (or when asking in the personal space). */
const DEFAULT_MAX_COMPLETION_TOKENS = 1024;
/** The answer of a ragOnly request when nothing in the documents matched: no model call, nothing charged. */
export const RAG_ONLY_NOTHING_FOUND = 'I could not find anything about this in your documents, and I was asked to answer only from them.';

export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

interface ToolRecord {
  tool: string;
  arguments: unknown;
  response: string;
}

/**
 * The Q&A pipeline shared by the three endpoints; only the prompt generator differs.
 * Order: context (institution, assistant, thread, memory, retrieval, prompt) → credit check (atomic
 * reservation of the maximum cost) → content filter → model call (streamed when the socket is valid;
 * tool rounds reserve their own maximum) → credit payment (actual cost; the rest released) → history
 * record → response. Failures after the reservation release it whole and are recorded with
 * success false (content filter 422, upstream 502).
 */
export class QandaService {
  private readonly filter: ContentFilter;

  constructor(
    private readonly ctx: AppContext,
    private readonly realtime: RealtimeGateway,
  ) {
    this.filter = new ContentFilter(ctx.config.contentFilter);
  }

  /** Ends what the service runs beside the requests (the content filter's worker thread). */
  close(): Promise<void> {
    return this.filter.close();
  }

  /**
   * Answers a question. With an idempotency key (platform/idempotency.ts), a retry of a request that
   * succeeded gets its response again (`replayed`), without a model call or a charge. The claim names the
   * request by its history id, which is also the ref_id of its credit reservation: a retry that takes over
   * the claim of a request whose node died releases that request's reservation whole in the same
   * transaction (the dead request never pays, and its credits come back at once instead of after the
   * reservation sweep's two hours).
   */
  async ask(auth: AuthContext, mode: PromptMode, body: QandaInput, idempotencyKey?: string): Promise<{ response: QandaResult; replayed: boolean }> {
    // The socket id is how this attempt is delivered, not what it asks: a retry after a reconnect has a new one.
    const { socketId: _socket, ...args } = body.requestArgs ?? {};
    const { ctx } = this;
    const historyId = newId();
    let released = false;
    const result = await ctx.idempotency.run<QandaResult>(
      {
        userId: auth.userId,
        key: idempotencyKey,
        request: { mode, institution: auth.institutionId ?? null, body: { ...body, requestArgs: args } },
        holder: historyId,
        onTakeover: async (tx, previous) => {
          released = await releaseReservation(tx, previous, auth.userId, ctx.clock.now());
        },
      },
      (keyed) => {
        // the released reservation moved the balance GET /api/user/me shows (the dead request was this user's: keys are per user, and the release asks for the user's own)
        if (released) ctx.auth.cache.invalidateUser(auth.userId);
        return this.answer(auth, mode, body, historyId, keyed);
      },
    );
    return result.replayed ? { response: await this.replay(auth, body, result.response), replayed: true } : result;
  }

  /** A succeeded request's response sent again; streamed in one piece when this attempt names a connected socket. */
  private async replay(auth: AuthContext, body: QandaInput, saved: QandaResult): Promise<QandaResult> {
    const socketId = body.requestArgs?.socketId;
    const sink = socketId ? await this.realtime.sinkFor(socketId, auth.userId) : null;
    let streamingError: string | undefined;
    if (sink) {
      const id = body.id ?? 0;
      try {
        const delivered =
          sink.emit({ id, chunk: saved.outputs.join(''), index: 0, done: false }) &&
          sink.emit({ id, chunk: '', index: 1, done: true, usage: saved.usage, credits: saved.credits }) &&
          (await sink.connected());
        if (!delivered) streamingError = 'The socket disconnected while the answer was streaming';
      } catch (err) {
        streamingError = `Streaming failed: ${err instanceof Error ? err.message : String(err)}`;
      }
    }
    const { streamingError: _previous, ...rest } = saved;
    return { ...rest, streamingFailed: streamingError !== undefined, ...(streamingError ? { streamingError } : {}) };
  }

  private async answer(auth: AuthContext, mode: PromptMode, body: QandaInput, historyId: string, keyed: KeyedRequest<QandaResult> | null): Promise<QandaResult> {
    const started = performance.now();
    const { ctx } = this;
    const args = body.requestArgs ?? {};
    const question = body.inputs[body.inputs.length - 1]!;
    if (question.trim() === '') throw badField('inputs', 'The last input (the question) must not be blank');
    const timezone = args.userTimezone ?? auth.user.timezone ?? 'UTC';
    if (!isTimeZone(timezone)) throw badField('requestArgs.userTimezone', `Unknown IANA time zone "${timezone}"`);
    if (args.ragOnly && args.ragIgnore) throw badField('requestArgs.ragOnly', 'ragOnly and ragIgnore cannot both be true');

    // ── context ──
    let institutionId = auth.institutionId;
    if (args.institutionPublicId) {
      const found = await assistantsRepo.findInstitutionIdByPublicId(ctx.db, args.institutionPublicId.toLowerCase());
      if (!found) throw notFound('Institution');
      institutionId = found;
    }
    // The caller as it acts in the institution asked in (enrolment checked): what retrieval and the tools search.
    const asker = actingIn(auth, institutionId ?? null);
    const institution = institutionId ? await assistantsRepo.findInstitutionSwitches(ctx.db, institutionId) : undefined;
    if (institutionId && !institution) throw notFound('Institution');
    if (institution && institution.status !== 'active') throw forbidden('This institution is not active');

    const assistantId = args.assistantId ?? args.selectedCourse?.assistant?._id;
    let assistant: assistantsRepo.AssistantRow | undefined;
    if (assistantId) {
      assistant = await assistantsRepo.findAssistant(ctx.db, assistantId).catch(() => undefined);
      assertUseAssistant(auth, assistant, institution ?? null);
    }

    const courseId = args.selectedCourse?.course_id ?? null;
    const ownTurns: Array<{ input: string; output: string }> = [];
    const outputs = body.outputs ?? [];
    for (let i = 0; i < body.inputs.length - 1; i++) ownTurns.push({ input: body.inputs[i]!, output: outputs[i] ?? '' });
    const remember = assistant ? assistant.rememberHistory > 0 : true;
    const historyCount = assistant ? assistant.historyCount : DEFAULT_HISTORY_COUNT;
    // The stored thread (selectedCourse) is used when the request carries no earlier turns of its own.
    const stored =
      args.selectedCourse && remember && ownTurns.length === 0
        ? await historiesRepo.threadTurns(ctx.db, { userId: auth.userId, institutionId: institutionId ?? null, courseId, assistantId: assistant?.id ?? null }, historyCount)
        : [];

    const memory = await loadMemoryParameters(ctx, asker, institutionId ?? null);
    const collectionIds = assistant && assistant.ragCollections.length > 0 ? assistant.ragCollections : undefined;
    const search = async (query: string, limit: number): Promise<PromptPassage[]> => {
      const found = await retrieve(ctx, asker, query, { limit, ...(collectionIds ? { collectionIds } : {}) });
      // The dense side ranks every chunk of a small scope, so a passage grounds an answer only when the
      // text or the graph matched it, or its cosine clears a floor: otherwise `ragOnly` would answer
      // from whatever happens to be nearest.
      return found.results
        .filter((h) => h.scores.lexical !== undefined || h.scores.kag !== undefined || (h.denseScore ?? 0) >= QA_DENSE_FLOOR)
        .map((h) => ({ text: h.text, source: `${h.upload.file_title || h.upload.originalname}, part ${h.chunkIndex + 1}` }));
    };
    const passages = args.ragIgnore ? [] : await search(question, RETRIEVAL_LIMIT);

    const chatModel = ctx.providers.chatModel;
    const tools =
      chatModel.provider === 'local' || !assistant
        ? []
        : selectTools({ mode: assistant.assistantToolMode, tools: assistant.assistantTools, disabled: institution?.toolsDisabled ?? [] });
    const promptContext: PromptContext = {
      assistant: assistant
        ? { name: assistant.name, instructions: assistant.instructions, arguments: [assistant.argument1, assistant.argument2, assistant.argument3, assistant.argument4, assistant.argument5] }
        : null,
      institution: institution ? { name: institution.name, ainame: institution.ainame, about: institution.about } : null,
      user: { name: [auth.user.fname, auth.user.lname].filter(Boolean).join(' '), isoDate: args.userISODate ?? ctx.clock.now().toISOString(), timezone, location: auth.user.location },
      memory,
      history: [...stored, ...ownTurns],
      passages,
      question,
      ragOnly: args.ragOnly === true,
      ragIgnore: args.ragIgnore === true,
      tools: tools.map((t) => t.name),
    };
    const prompt = PROMPT_GENERATORS[mode](promptContext);

    const requestedModel = institution?.conversationModel || chatModel.defaultModel;
    const price = priceFor(requestedModel, ctx.config.modelPrices);
    const maxTokens = institution?.maxCompletionTokens || DEFAULT_MAX_COMPLETION_TOKENS;
    const payer: Payer =
      institution && institution.poolCredits
        ? { kind: 'institution', institutionId: institution.id, accountId: institution.accountId }
        : { kind: 'user', userId: auth.userId, accountId: auth.accountId };
    const requestTools = tools.length ? tools : undefined;
    await loadEncoding();
    const toolTokens = requestTools ? countTextTokens(JSON.stringify(requestTools)) : 0;
    const membership = institutionId ? auth.memberships.get(institutionId) : undefined;
    const record = {
      id: historyId,
      userId: auth.userId,
      accountId: institution?.accountId ?? auth.accountId,
      institutionId: institutionId ?? null,
      assistantId: assistant?.id ?? null,
      courseId,
      courseName: args.selectedCourse?.course_name ?? null,
      requestId: body.id !== undefined ? Math.floor(body.id) : null,
      input: question,
      inputs: body.inputs,
      experimental: mode !== 'classic',
      promptMode: mode,
      roleId: membership?.role ?? 'personal',
      roleName: membership?.role ?? 'personal',
      discount: price.discount ?? 0,
      conversationModel: requestedModel,
    };

    // ── credit check: the maximum cost, reserved atomically ──
    let reserved = maxCostUnits(countInputTokens(prompt.messages) + toolTokens, maxTokens, price);
    const now = () => ctx.clock.now();
    const balance = await reserveCredits(ctx.db, payer, reserved, auth.userId, historyId, now());
    if (balance === null) throw insufficientCredits(`Not enough credits for this request (it may cost up to ${toCredits(reserved)} credits)`);
    // Until a settlement commits, the reservation is open. A failure that did not settle it ends it on the
    // way out: a fault of ours (a database error, an answer that cannot be saved, a bug: 500) releases it
    // whole, as the caller gets no answer to pay for (and would pay twice for the retry); a record deleted
    // meanwhile (409) charges what completed model calls consumed. (A process killed meanwhile leaves it to
    // the reservation sweep, or, under an Idempotency-Key, to the retry that takes the key over once its lease lapsed.)
    let open = true;
    /** what the completed model calls consumed, exactly (pricing.exactCost); charged as chargeUnits of it, rounded up once */
    let chargedExact = 0;
    /** What a failure's settlement charged (the record and the last stream event say it). */
    let failedCharge = 0;
    /**
     * Drops the caller's cached user row after a settlement moved its balance: after the stream's last event, since the
     * gateway checks the caller's sockets again on it and holds their events until the check is back.
     */
    const paid = () => ctx.auth.cache.invalidateUser(auth.userId);
    /** Sends the stream's last event with `error`, unless a last event was sent already (set once the stream exists). */
    let endStream: ((error: string, credits?: number) => void) | undefined;
    /** What the model calls of the answer used so far, and whether it streams: what a failed record says. */
    let usage: TokenUsage = { inputTokens: 0, outputTokens: 0, totalTokens: 0 };
    let streaming = false;
    /** What a failed record keeps of the answer so far (a tool round that could not continue). */
    type Partial = { outputs?: string[]; toolCalls?: ToolRecord[]; conversationModel?: string };
    const fail = async (err: AppError, used = 0, streamed = false, partial: Partial = {}, charge = chargeUnits(chargedExact)) => {
      // The model calls that completed are paid (a tool round before a failed call), unless `charge` says
      // otherwise, the rest of the reservation released; with the failed record, in one commit.
      await ctx.db.transaction(async (tx) => {
        // a request whose key a retry took over pays nothing: the claim first (ClaimLostError), locked until this commits
        await keyed?.hold(tx);
        failedCharge = (await settleCredits(tx, payer, reserved, charge, auth.userId, historyId, now())).chargedUnits;
        await historiesRepo.insertHistory(tx, {
          ...record,
          outputs: [],
          ...partial,
          success: false,
          usage: used,
          credits: toCredits(failedCharge),
          errorCode: err.code,
          errorMessage: err.message,
          streamed,
          queryDurationMs: Math.round(performance.now() - started),
          createdAt: now(),
          updatedAt: now(),
        });
      });
      open = false;
      // the reservation and its settlement moved the balance GET /api/user/me shows: the caller's cached row is
      // dropped by `paid()`, once the stream's last event is out (dropping it makes the gateway check the caller's
      // sockets again, and hold their events meanwhile)
      return err;
    };
    try {
      // ── content filter ──
      // the earlier answers the client sends back reach the model as the assistant's turns: checked with the inputs
      const verdict = await this.filter.check(
        [...body.inputs, ...ownTurns.map((turn) => turn.output)],
        (err) => ctx.log.warn({ err }, 'moderation call failed; local rules applied only'),
        (err) => ctx.log.error({ err }, 'the content filter\'s patterns could not finish; the request was refused'),
      );
      if (verdict.blocked) {
        const blocked = await fail(contentBlocked(`The input was blocked by the content filter (${verdict.reason})`));
        paid();
        throw blocked;
      }

      // ── model ──
      const sink: StreamSink | null = args.socketId ? await this.realtime.sinkFor(args.socketId, auth.userId) : null;
      streaming = Boolean(sink);
      const streamId = body.id ?? 0;
      let index = 0;
      let streamingFailed = false;
      let streamingError: string | undefined;
      let ended = false;
      const emit = (chunk: string, done: boolean, extra: { usage?: number; credits?: number; error?: string } = {}) => {
        if (done) ended = true;
        if (!sink || streamingFailed) return;
        try {
          if (!sink.emit({ id: streamId, chunk, index, done, ...extra })) {
            streamingFailed = true;
            streamingError = 'The socket disconnected while the answer was streaming';
            return;
          }
          index++;
        } catch (err) {
          streamingFailed = true;
          streamingError = `Streaming failed: ${err instanceof Error ? err.message : String(err)}`;
        }
      };

      let text = '';
      // a failure after the stream began (the payment's commit, a record that cannot be saved) still ends it
      endStream = (error, credits) => {
        if (!ended) emit('', true, { error, usage: usage.totalTokens, ...(credits === undefined ? {} : { credits }) });
      };
      let reportedModel = requestedModel;
      const toolRecords: ToolRecord[] = [];
      if (args.ragOnly && passages.length === 0) {
        text = RAG_ONLY_NOTHING_FOUND;
        emit(text, false);
        reportedModel = 'none';
      } else {
        const messages: ChatMessage[] = [...prompt.messages];
        for (let round = 0; ; round++) {
          const offerTools = requestTools && round < MAX_TOOL_ROUNDS ? requestTools : undefined;
          const request: ChatRequest = {
            purpose: 'answer',
            messages,
            ...(institution?.conversationModel ? { model: institution.conversationModel } : {}),
            maxTokens,
            context: prompt.context,
            ...(offerTools ? { tools: offerTools } : {}),
          };
          let result: ChatResult;
          try {
            result = await this.call(request, sink ? (piece) => emit(piece, false) : null, (piece) => (text += piece));
          } catch (err) {
            // The provider's own words stay in the log (as in the error handler): they may name hosts or models.
            const upstream = err instanceof UpstreamError || (err instanceof Error && err.name === 'UpstreamError');
            // a shutdown that ran out of time stopped the call (app.ts lazyProviders): the reservation is released and the caller told (503)
            const stopped = err instanceof AppError && err.code === 'SERVICE_UNAVAILABLE';
            if (upstream) ctx.log.warn({ err }, 'model provider failed during Q&A');
            else if (stopped) ctx.log.info('a model call was stopped by the shutdown');
            else ctx.log.error({ err }, 'the answer could not be produced');
            const failure = upstream ? upstreamFailed('The model provider failed; try again later') : stopped ? err : new AppError(500, 'INTERNAL', 'The answer could not be produced');
            // the last event says what the answer used and cost, as a successful one does (contract §6); it is
            // sent once the failure is settled (so its credits are the ones charged), and also if settling failed
            // the record keeps the tool calls of the rounds that completed (and were paid), as the 402 path's does
            throw await fail(failure, usage.totalTokens, Boolean(sink), { toolCalls: toolRecords, conversationModel: reportedModel }).finally(() => {
              emit('', true, { error: failure.message, usage: usage.totalTokens, ...(open ? {} : { credits: toCredits(failedCharge) }) });
              if (!open) paid();
            });
          }
          usage = { inputTokens: usage.inputTokens + result.usage.inputTokens, outputTokens: usage.outputTokens + result.usage.outputTokens, totalTokens: usage.totalTokens + result.usage.totalTokens };
          reportedModel = result.model || requestedModel;
          const callPrice = ctx.config.modelPrices[reportedModel] ? priceFor(reportedModel, ctx.config.modelPrices) : price;
          // the calls of one answer add up exactly; the charge is rounded up once
          chargedExact += exactCostOfUsage(result.usage, callPrice);
          if (!result.toolCalls?.length || !offerTools) break;

          // Tool round: run the calls (at most MAX_TOOL_CALLS_PER_ROUND of them: the turn sent back holds those
          // alone, and the last response tells the model the rest did not run), then reserve the next call's
          // maximum before making it.
          const calls = result.toolCalls.slice(0, MAX_TOOL_CALLS_PER_ROUND);
          const cut = result.toolCalls.length > calls.length;
          if (cut) ctx.log.warn({ asked: result.toolCalls.length, run: calls.length, historyId }, 'the model asked for more tool calls in one message than run');
          messages.push({ role: 'assistant', content: result.text, toolCalls: calls });
          const offered = offerTools.map((tool) => tool.name);
          for (const [i, call] of calls.entries()) {
            const ran = await this.runToolCall(call, offered, search, asker, institutionId ?? null, timezone);
            const response = cut && i === calls.length - 1 ? `${ran}\n\n${tooManyToolCallsNote(result.toolCalls.length)}` : ran;
            toolRecords.push({ tool: call.name, arguments: parseArguments(call.arguments), response });
            messages.push({ role: 'tool', content: response, toolCallId: call.id });
          }
          const more = maxCostUnits(countInputTokens(messages) + toolTokens, maxTokens, price);
          if (!(await extendReservation(ctx.db, payer, more, auth.userId, historyId, now()))) {
            // What was consumed so far is paid; the request ends as the reservation could not grow.
            const err = await fail(insufficientCredits('Not enough credits for the next model call of this answer (tool round)'), usage.totalTokens, Boolean(sink), {
              outputs: text ? [text] : [],
              toolCalls: toolRecords,
              conversationModel: reportedModel,
            });
            emit('', true, { error: 'Not enough credits', usage: usage.totalTokens, credits: toCredits(failedCharge) });
            paid();
            throw err;
          }
          reserved += more;
        }
      }

      // a socket that went away mid-answer (on another node emits cannot tell) makes the answer's streaming failed, as saved
      if (sink && !streamingFailed && !(await sink.connected())) {
        streamingFailed = true;
        streamingError = 'The socket disconnected while the answer was streaming';
      }
      // ── payment: the actual cost; the rest of the reservation released ──
      const duration = Math.round(performance.now() - started);
      // ── payment, history and the idempotency key's response: one commit, so the ledger and the saved records always agree ──
      const response = await ctx.db.transaction(async (tx) => {
        // the key's claim first: a request a retry took over (its lease lapsed) pays and saves nothing (ClaimLostError); a
        // takeover waits for this commit. (The takeover locks the claim before the reservation too: no deadlock.)
        await keyed?.hold(tx);
        const settled = await settleCredits(tx, payer, reserved, chargeUnits(chargedExact), auth.userId, historyId, now());
        const credits = toCredits(settled.chargedUnits);
        await historiesRepo.insertHistory(tx, {
          ...record,
          outputs: [text],
          toolCalls: toolRecords,
          success: true,
          usage: usage.totalTokens,
          credits,
          conversationModel: reportedModel,
          streamed: Boolean(sink),
          streamingFailed,
          queryDurationMs: duration,
          createdAt: now(),
          updatedAt: now(),
        });
        const result: QandaResult = {
          success: true,
          streamingFailed,
          ...(streamingFailed ? { streamingError: streamingError ?? 'Streaming failed' } : {}),
          outputs: [text],
          usage: usage.totalTokens,
          credits,
          creditsUsedTotal: settled.userCreditsUsed,
          creditsRemaining: settled.balance,
          query_duration_ms: Math.round(performance.now() - started),
          model: reportedModel,
          historyId,
          promptMode: mode,
        };
        await keyed?.complete(tx, result);
        return result;
      });
      open = false;
      emit('', true, { usage: usage.totalTokens, credits: response.credits });
      // the caller's cached user row (credits, credits_used: GET /api/user/me) changed with the payment
      paid();
      // the last event can still find the socket gone: the record is told too, so that it and the response agree
      if (streamingFailed && !response.streamingFailed) {
        await historiesRepo.updateHistory(ctx.db, historyId, auth.userId, { streamingFailed: true, updatedAt: now() }).catch((e: unknown) =>
          ctx.log.warn({ err: e, historyId }, 'could not mark the history record as not streamed to the end'),
        );
        return { ...response, streamingFailed, streamingError: streamingError ?? 'Streaming failed' };
      }
      return response;
    } catch (err) {
      // a retry took the key over (this request's lease lapsed: its renewals did not reach the database for
      // IDEMPOTENCY_LEASE_MS): it pays nothing and saves nothing; its reservation, if the takeover did not
      // release it already, is released whole here
      if (err instanceof ClaimLostError) {
        if (open) {
          await settleCredits(ctx.db, payer, reserved, 0, auth.userId, historyId, now()).then(
            () => (open = false),
            (e: unknown) => {
              if (!(e instanceof ReservationClosedError)) ctx.log.error({ err: e, historyId }, 'an open credit reservation could not be released after its key was taken over');
            },
          );
        }
        endStream?.(err.message, 0);
        paid();
        throw err;
      }
      // the sweep released the reservation (the request outlived RESERVATION_STALE_MS): nothing is open to pay
      if (err instanceof ReservationClosedError) {
        // or its payer was deleted meanwhile (the open reservation went with it)
        const gone = !(await payerExists(ctx.db, payer).catch(() => true));
        const closed = new AppError(
          409,
          'CONFLICT',
          gone
            ? 'The institution or user paying for this answer was deleted while it was being generated; it was not charged nor saved'
            : 'The answer took longer than its credit reservation is held; it was not charged',
        );
        endStream?.(closed.message, 0);
        paid();
        throw closed;
      }
      // the record's institution, account or user was deleted while the model answered: it cannot be saved
      const deleted = isForeignKeyViolation(err);
      const upstream = err instanceof UpstreamError || (err instanceof Error && err.name === 'UpstreamError');
      // A fault of ours: a database error (also one whose SQLSTATE the error handler would take for bad input:
      // the client's input was checked before the model was called), an answer that cannot be saved, a bug.
      // (The answers this pipeline gives itself, 402, 422, 502, 503, are AppErrors, their settlement done.)
      const ours = !deleted && !upstream && !(err instanceof AppError);
      if (ours) ctx.log.error({ err, historyId }, 'the answer could not be produced or saved');
      let charged: number | undefined;
      if (open && ours) {
        // nothing is charged; the failed turn is recorded with the release when it can be (else the release alone)
        try {
          await fail(new AppError(500, 'INTERNAL', 'The answer could not be produced'), usage.totalTokens, streaming, {}, 0);
          charged = 0;
        } catch (e) {
          ctx.log.error({ err: e, historyId }, 'the failed answer could not be recorded');
          try {
            await settleCredits(ctx.db, payer, reserved, 0, auth.userId, historyId, now());
            open = false;
            charged = 0;
          } catch (e2) {
            ctx.log.error({ err: e2, historyId }, 'an open credit reservation could not be released after a failure');
          }
        }
      } else if (open) {
        await settleCredits(ctx.db, payer, reserved, chargeUnits(chargedExact), auth.userId, historyId, now()).then(
          (settled) => (charged = toCredits(settled.chargedUnits)),
          (e: unknown) => ctx.log.error({ err: e, historyId }, 'an open credit reservation could not be settled after a failure'),
        );
      }
      const failure = deleted
        ? new AppError(409, 'CONFLICT', 'The institution or user this answer belongs to was deleted while it was being generated; the answer was not saved')
        : ours
          ? new AppError(500, 'INTERNAL', charged === 0 ? 'The answer could not be produced; it was not charged' : 'The answer could not be produced')
          : err;
      // the client streaming the answer learns that it ended, and how (the 502 and 402 paths sent theirs already)
      endStream?.(failure instanceof AppError && (failure.statusCode < 500 || ours) ? failure.message : 'The answer could not be produced', charged);
      if (charged !== undefined) paid();
      throw failure;
    }
  }

  /** One model call: streamed piece by piece to `onPiece` when streaming, else one completion. */
  private async call(request: ChatRequest, onPiece: ((piece: string) => void) | null, collect: (piece: string) => void): Promise<ChatResult> {
    const model = this.ctx.providers.chatModel;
    if (!onPiece) {
      const result = await model.complete(request);
      collect(result.text);
      return result;
    }
    for await (const event of model.stream(request)) {
      if (event.type === 'delta') {
        collect(event.text);
        onPiece(event.text);
      } else return event.result;
    }
    throw new UpstreamError('The model stream ended without a result');
  }

  /** Runs a call the model made; only a tool of `offered` (what its request offered) runs. */
  private async runToolCall(
    call: ToolCall,
    offered: readonly string[],
    search: (q: string, limit: number) => Promise<PromptPassage[]>,
    auth: AuthContext,
    institutionId: string | null,
    timezone: string,
  ): Promise<string> {
    try {
      return await runTool(call.name, call.arguments, {
        offered,
        search,
        memory: () => loadMemoryParameters(this.ctx, auth, institutionId),
        now: () => this.ctx.clock.now(),
        timezone,
      });
    } catch (err) {
      this.ctx.log.warn({ err, tool: call.name }, 'tool call failed');
      return 'Error: the tool failed';
    }
  }
}

function parseArguments(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}
