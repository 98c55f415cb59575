import { Type } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';
import { errorBody } from '../../shared/errors.js';
import { errorResponses } from '../../shared/schemas.js';

export async function healthRoutes(app: App, ctx: AppContext): Promise<void> {
  app.get(
    '/healthz',
    { schema: { tags: ['ops'], summary: 'Liveness: the process is up', response: { 200: Type.Object({ success: Type.Boolean(), status: Type.String() }) } } },
    async () => ({ success: true, status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        tags: ['ops'],
        summary: 'Readiness: the database answers',
        response: { 200: Type.Object({ success: Type.Boolean(), status: Type.String(), database: Type.String() }), ...errorResponses(503) },
      },
    },
    async (request, reply) => {
      try {
        await ctx.database.ping();
        return { success: true, status: 'ready', database: ctx.database.kind };
      } catch (err) {
        request.log.warn({ err }, 'readiness check failed');
        return reply.status(503).send(errorBody('INTERNAL', 'Database unreachable'));
      }
    },
  );
}
