import type { AppContext } from '../../context.js';
import { authOf, requireAuth, requirePermission, SECURED } from '../../http/auth.js';
import { limits } from '../../http/rate-limit.js';
import { absentBodyIsEmpty, type App } from '../../http/types.js';
import { REPLAYED_HEADER } from '../../platform/idempotency.js';
import { errorResponses, IDEMPOTENCY_NOTE, IdempotencyHeaders, IdParams, SuccessOnly } from '../../shared/schemas.js';
import type { RealtimeGateway } from '../realtime/gateway.js';
import { ReservationSweep } from './reservation-sweep.js';
import {
  AdminAssistantsBody,
  AdminAssistantsResponse,
  AssistantEnvelope,
  AssistantListEnvelope,
  AssistantsQuery,
  CreateAssistantBody,
  LikeBody,
  LikeResponse,
  PatchAssistantBody,
} from './assistants.schemas.js';
import { AssistantsService } from './assistants.service.js';
import { FeedbacksBody, FeedbacksResponse, HistoriesBody, HistoriesResponse, HistoryEnvelope, PatchHistoryBody } from './histories.schemas.js';
import { HistoriesService } from './histories.service.js';
import type { PromptMode } from './prompts.js';
import { QandaBody, QandaResponse } from './qanda.schemas.js';
import { QandaService } from './qanda.service.js';
import { MAX_TOOL_CALLS_PER_ROUND } from './tools.js';

const QANDA_DESCRIPTION =
  'Same contract on the three endpoints; only the system prompt generator differs (classic, soul, soul-v2). Order: context ' +
  "(institution: requestArgs.institutionPublicId, else the token's current institution, else the personal space; the caller must be enrolled: " +
  '403; unknown publicId 404), assistant (assistantId or selectedCourse.assistant._id; must be visible and usable: 404/403), thread ' +
  "(selectedCourse.course_id: the assistant's history_count earlier turns of the same user, institution, course and assistant when " +
  'remember_history and the request carries no earlier turns itself; forgotten and failed turns skipped), retrieval (unless ragIgnore; ' +
  "restricted to the assistant's ragCollections), then: credit check = atomic reservation of the maximum cost (input tokens + the " +
  "institution's maxCompletionTokens at the model's MODEL_PRICES price; poolCredits: the institution pays, else the user's own balance) " +
  '→ 402 INSUFFICIENT_CREDITS; content filter → 422 CONTENT_BLOCKED (nothing charged, record success false); model call, streamed on ' +
  'RECEIVE_STREAM {id, chunk, index, done} when requestArgs.socketId is a connected socket of the caller (else synchronous; a last event ' +
  'has done true, chunk "" and usage, credits); credit payment (the actual cost rounded up to 0.0001 credit, the rest released); ' +
  'history record; response. ragOnly with no matching passage answers so without calling the model (nothing charged). Provider ' +
  'timeout, 5xx, a stream dropped mid-way or a message content that is neither text nor text parts: 502 UPSTREAM_FAILED, nothing ' +
  'charged for the failed call, record success false (keeping the tool calls of rounds that completed and were paid). What the ' +
  'provider sends is stored without NUL characters, a lone surrogate as U+FFFD, and a content of text parts as their text. A ' +
  'failure of ours (the answer cannot be saved, a database error): 500 INTERNAL, nothing charged (the reservation released whole), ' +
  'record success false when it can be written. A socket that disconnects ' +
  'mid-answer: streamingFailed true with streamingError, and outputs still hold the whole answer. An answer still running when its ' +
  'credit reservation is released as stale (2 hours without growing): 409 CONFLICT, nothing charged. An institution or user deleted ' +
  'while its answer is generated: 409 CONFLICT, the answer not saved, what the model consumed charged to the payer if it still exists. ' +
  'Rate limited per user ' +
  '(QANDA_RATE_LIMIT_PER_MINUTE). Tools (vault_search, memory_lookup, current_datetime) are offered to openai-compatible models per ' +
  "the assistant's assistantToolMode minus the institution's toolsDisabled, and only those run: a call of any other tool is answered " +
  'to the model "Error: tool <name> is not available"; each call and response is kept on the record. At most ' +
  `${MAX_TOOL_CALLS_PER_ROUND} tool calls of one model message run: the calls beyond are not run, not sent back to the model nor ` +
  'recorded, and the last response of the round tells the model "Error: too many tool calls: ..." (how many it asked for, and ' +
  `that only the first ${MAX_TOOL_CALLS_PER_ROUND} ran). ` +
  `${IDEMPOTENCY_NOTE} The same request means the endpoint, the current institution and the body (the socket id may differ); a ` +
  'replay makes no model call and charges nothing, and streams the saved answer in one piece to its socket if it names one. A retry ' +
  'that takes over the key of a request whose node died (its lease lapsed) releases, in the same transaction, the credits that ' +
  'request held: it is never charged, and a request taken over that was alive after all gets 409 CONFLICT, not charged nor saved.';

/** The node's sweep of stale credit reservations: the users it gives credits back to have their cached user rows dropped (GET /api/user/me). */
export function reservationSweep(ctx: AppContext): ReservationSweep {
  return new ReservationSweep(ctx.db, ctx.clock, ctx.log, (users) => {
    for (const id of users) ctx.auth.cache.invalidateUser(id);
  });
}

/** Conversation: the Q&A endpoints, assistants, histories and their admin listings (contract §6). */
export async function conversationRoutes(app: App, ctx: AppContext, realtime: RealtimeGateway): Promise<void> {
  const qanda = new QandaService(ctx, realtime);
  // Reservations whose request died with its process are released in the background of every node.
  const sweep = reservationSweep(ctx);
  app.addHook('onReady', async () => sweep.start());
  app.addHook('preClose', async () => sweep.stop());
  app.addHook('onClose', async () => qanda.close());
  const assistants = new AssistantsService(ctx);
  const histories = new HistoriesService(ctx);
  const authenticated = requireAuth(ctx);
  const qandaRate = limits(app, { max: ctx.config.qandaRateLimitPerMinute, timeWindowMs: 60_000, key: (request) => `qanda:${authOf(request).userId}` });

  const qandaRoute = (url: string, mode: PromptMode, summary: string) =>
    app.post(
      url,
      {
        schema: {
          tags: ['conversation'],
          summary,
          description: QANDA_DESCRIPTION,
          security: SECURED,
          headers: IdempotencyHeaders,
          body: QandaBody,
          response: { 200: QandaResponse, ...errorResponses(400, 401, 402, 403, 404, 409, 422, 429, 502) },
        },
        preValidation: authenticated,
        preHandler: qandaRate,
      },
      async (request, reply) => {
        const { response, replayed } = await qanda.ask(authOf(request), mode, request.body, request.headers['idempotency-key']);
        if (replayed) reply.header(REPLAYED_HEADER, 'true');
        return response;
      },
    );
  qandaRoute('/api/ai/personal/qanda', 'classic', 'Ask the assistant (classic prompt)');
  qandaRoute('/api/ai/experimental/personal/qanda', 'soul', 'Ask the assistant (first experimental prompt, soul)');
  qandaRoute('/api/ai/experimental/personal/qanda-v2', 'soul-v2', 'Ask the assistant (second experimental prompt, soul-v2)');

  // ───────────── histories ─────────────

  app.post(
    '/api/user/histories',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Your conversation history records',
        description:
          "Only the caller's own records. institution defaults to the current one (null: the personal space); course_id 0 matches 0 or " +
          'none; before/after are epoch ms; historyId selects one record; search is a case-insensitive Postgres regular expression over ' +
          'input, inputs and outputs (at most 200 characters, no back-references; an invalid one is a 400). The newest `limit` (default ' +
          '100) are selected and returned oldest first; strings are trimmed to 200 characters; tool responses are cut to 80 characters ' +
          'unless tools is true. allInstitutions: every enrolled institution plus the personal space, institution as {_id, name, ainame, ' +
          'picture} or {personal: true}, course_id ignored, and `total` (matches of the search, not capped by limit) and `totalInScope`.',
        security: SECURED,
        body: HistoriesBody,
        response: { 200: HistoriesResponse, ...errorResponses(400, 401) },
      },
      preValidation: [authenticated, absentBodyIsEmpty],
    },
    async (request) => histories.list(authOf(request), request.body),
  );

  app.patch(
    '/api/user/history/:id',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Mark a history record (favorite, forgotten, thumb, feedback)',
        description: 'Only the asker may change its records (others: 404). thumbUpDown up, down or null; a thumb or feedback text makes the record appear in POST /api/admin/feedbacks. Forgotten records are no longer sent to the model as thread history.',
        security: SECURED,
        params: IdParams,
        body: PatchHistoryBody,
        response: { 200: HistoryEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: [authenticated, absentBodyIsEmpty],
    },
    async (request) => ({ success: true, data: await histories.update(authOf(request), request.params.id, request.body) }),
  );

  // ───────────── assistants ─────────────

  const ACCESS =
    'Visibility: the owner; admins of its institution (institution admin, account admin, superadmin); members of the institution for ' +
    'system assistants (no owner) and institution_shared ones unless admin_only. Others get 404. Editing: owner, admins, or anyone who ' +
    'sees it when editable_others. admin_only and system assistants are set by admins only (403).';

  app.post(
    '/api/user/assistant',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Create an assistant',
        description: `institution defaults to the current one (null: a personal assistant, never shared). Plain members may not create assistants where disableAssistantsForUser is set (403). ragCollections must be collections you can see (400). ${ACCESS}`,
        security: SECURED,
        body: CreateAssistantBody,
        response: { 201: AssistantEnvelope, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request, reply) => reply.status(201).send({ success: true, data: await assistants.create(authOf(request), request.body) }),
  );

  app.get(
    '/api/user/assistants',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Assistants you can use in an institution',
        description: `The assistants of the institution (default the current one) visible to you, and your personal ones; sorted by name. ${ACCESS}`,
        security: SECURED,
        querystring: AssistantsQuery,
        response: { 200: AssistantListEnvelope, ...errorResponses(400, 401, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await assistants.list(authOf(request), request.query.institution) }),
  );

  app.get(
    '/api/user/assistant/:id',
    {
      schema: { tags: ['conversation'], summary: 'One assistant', description: ACCESS, security: SECURED, params: IdParams, response: { 200: AssistantEnvelope, ...errorResponses(400, 401, 404) } },
      preValidation: authenticated,
    },
    async (request) => ({ success: true, data: await assistants.get(authOf(request), request.params.id) }),
  );

  app.patch(
    '/api/user/assistant/:id',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Change an assistant',
        description: ACCESS,
        security: SECURED,
        params: IdParams,
        body: PatchAssistantBody,
        response: { 200: AssistantEnvelope, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: [authenticated, absentBodyIsEmpty],
    },
    async (request) => ({ success: true, data: await assistants.update(authOf(request), request.params.id, request.body) }),
  );

  app.delete(
    '/api/user/assistant/:id',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Delete an assistant',
        description: `Owner or admins of its institution. History records keep their text and lose the link. ${ACCESS}`,
        security: SECURED,
        params: IdParams,
        response: { 200: SuccessOnly, ...errorResponses(400, 401, 403, 404) },
      },
      preValidation: authenticated,
    },
    async (request) => {
      await assistants.remove(authOf(request), request.params.id);
      return { success: true, message: 'Assistant deleted' };
    },
  );

  app.post(
    '/api/user/assistant/:id/like',
    {
      schema: {
        tags: ['conversation'],
        summary: 'Like (or unlike) an assistant',
        description: 'Counted once per user: liking twice changes nothing; {like: false} removes your like. Anyone who sees the assistant.',
        security: SECURED,
        params: IdParams,
        body: LikeBody,
        response: { 200: LikeResponse, ...errorResponses(400, 401, 404) },
      },
      preValidation: [authenticated, absentBodyIsEmpty],
    },
    async (request) => assistants.like(authOf(request), request.params.id, request.body.like ?? true),
  );

  // ───────────── admin listings ─────────────

  const LISTING =
    'Envelope {success, data, total, hasMore, page, pageSize, message}; page ≥ 1, pageSize 1 to 5000 (default 100; limitsearch is its ' +
    'deprecated alias), else 400. Scope: superadmin all; account admin its account (and institutions it administers); institution admin ' +
    'the institutions it administers; a plain user 403. account: space-separated account ids. usersearch is a literal case-insensitive ' +
    'substring (% _ and regex characters match themselves). Newest first.';

  app.post(
    '/api/admin/feedbacks',
    {
      schema: {
        tags: ['admin'],
        summary: 'Search feedback on answers',
        description: `History records with a thumb (up/down) or a feedback text (PATCH /api/user/history/{id}). usersearch matches the asker. ${LISTING}`,
        security: SECURED,
        body: FeedbacksBody,
        response: { 200: FeedbacksResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: [...requirePermission(ctx, 'admin.feedbacks.read'), absentBodyIsEmpty],
    },
    async (request) => histories.feedbacks(authOf(request), request.body),
  );

  app.post(
    '/api/admin/assistants',
    {
      schema: {
        tags: ['admin'],
        summary: 'Search assistants',
        description: `minimum: items are {_id, name, institution} (pagination still applies). admin_only / system_only (no owner) filter. usersearch matches the owner. ${LISTING}`,
        security: SECURED,
        body: AdminAssistantsBody,
        response: { 200: AdminAssistantsResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: [...requirePermission(ctx, 'admin.assistants.read'), absentBodyIsEmpty],
    },
    async (request) => assistants.adminList(authOf(request), request.body),
  );
}
