import type { SwaggerTransform, SwaggerTransformObject } from '@fastify/swagger';
import { absentBodyIsEmpty } from './types.js';

/**
 * What the OpenAPI document says of every route alike, added once here rather than in each route
 * schema (where one forgotten route makes the document lie):
 *
 * - a request that may carry a body (POST, PUT, PATCH, DELETE) can be refused before the route runs:
 *   400 for malformed JSON, 413 for a body over the limit, 415 for a content type the API does not read
 *   (errors.plugin.ts). Those statuses are listed on each such operation.
 * - every 429 says that it carries `Retry-After` (seconds), as the contract requires.
 * - a route whose body fields are all optional and which takes no body at all (`absentBodyIsEmpty`) says
 *   its body is not required; @fastify/swagger marks every body schema required.
 */
export function openapiTransforms(): { transform: SwaggerTransform; transformObject: SwaggerTransformObject } {
  const optionalBody = new Set<string>();
  return {
    transform: ({ schema, url, route }) => {
      if ([route.preValidation].flat().includes(absentBodyIsEmpty as never)) {
        for (const method of [route.method].flat()) optionalBody.add(`${method.toLowerCase()} ${openapiPath(url)}`);
      }
      return { schema, url };
    },
    transformObject: (document) => {
      if (!('openapiObject' in document)) return document.swaggerObject;
      const openapiObject = document.openapiObject;
      const paths = (openapiObject.paths ?? {}) as unknown as OpenApiDocument['paths'];
      for (const [path, operations] of Object.entries(paths)) {
        for (const [method, operation] of Object.entries(operations)) {
          if (!operation || typeof operation !== 'object' || !operation.responses) continue;
          const responses = operation.responses;
          if (BODY_METHODS.has(method)) {
            for (const status of ['400', '413', '415']) responses[status] ??= errorResponse(status);
            if (optionalBody.has(`${method} ${path}`) && operation.requestBody) operation.requestBody.required = false;
          }
          const limited = responses['429'];
          if (limited) limited.headers = { ...limited.headers, 'Retry-After': RETRY_AFTER };
        }
      }
      return openapiObject;
    },
  };
}

interface OpenApiResponse {
  description?: string;
  content?: unknown;
  headers?: Record<string, unknown>;
}

interface OpenApiOperation {
  responses?: Record<string, OpenApiResponse>;
  requestBody?: { required?: boolean };
}

interface OpenApiDocument {
  paths: Record<string, Record<string, OpenApiOperation>>;
}

const BODY_METHODS = new Set(['post', 'put', 'patch', 'delete']);

const RETRY_AFTER = { description: 'Seconds to wait before trying again', schema: { type: 'integer', minimum: 1 } };

const DESCRIPTIONS: Record<string, string> = {
  '400': 'Malformed JSON body or a field out of bounds (VALIDATION_FAILED)',
  '413': 'Request body over the size limit (PAYLOAD_TOO_LARGE)',
  '415': 'A content type the route does not read (UNSUPPORTED_MEDIA_TYPE); send application/json',
};

function errorResponse(status: string): OpenApiResponse {
  return { description: DESCRIPTIONS[status] ?? 'Error', content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorBody' } } } };
}

/** `/a/:id` as the OpenAPI document writes it: `/a/{id}`. */
function openapiPath(url: string): string {
  return url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}
