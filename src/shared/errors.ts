/** Stable error codes of the contract (§1); one error handler turns an AppError into the error body. */
export type ErrorCode =
  | 'VALIDATION_FAILED'
  | 'DUPLICATE_KEY'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'HEADERS_TOO_LARGE'
  | 'REQUEST_TIMEOUT'
  | 'CONFLICT'
  | 'INSUFFICIENT_CREDITS'
  | 'CONTENT_BLOCKED'
  | 'RATE_LIMITED'
  | 'UPSTREAM_FAILED'
  | 'SERVICE_UNAVAILABLE'
  | 'INTERNAL';

export interface ErrorDetail {
  field?: string;
  message: string;
  [key: string]: unknown;
}

export class AppError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetail[] = [],
    /** Extra response headers, e.g. Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'AppError';
  }
}

export const validationFailed = (message: string, details: ErrorDetail[] = []) => new AppError(400, 'VALIDATION_FAILED', message, details);
export const badField = (field: string, message: string) => validationFailed(message, [{ field, message }]);
export const duplicateKey = (message: string, details: ErrorDetail[] = []) => new AppError(400, 'DUPLICATE_KEY', message, details);
export const unauthenticated = (message = 'Authentication required') => new AppError(401, 'UNAUTHENTICATED', message);
export const forbidden = (message = 'You are not allowed to do this') => new AppError(403, 'FORBIDDEN', message);
export const notFound = (what = 'Record') => new AppError(404, 'NOT_FOUND', `${what} not found`);
export const conflict = (message: string) => new AppError(409, 'CONFLICT', message);
export const payloadTooLarge = (message: string) => new AppError(413, 'PAYLOAD_TOO_LARGE', message);
export const unsupportedMediaType = (message: string) => new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', message);
export const insufficientCredits = (message = 'Not enough credits for this request') => new AppError(402, 'INSUFFICIENT_CREDITS', message);
export const contentBlocked = (message = 'The input was blocked by the content filter') => new AppError(422, 'CONTENT_BLOCKED', message);
export const rateLimited = (retryAfterSeconds: number, message = 'Too many requests, try again later') =>
  new AppError(429, 'RATE_LIMITED', message, [], { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) });
export const upstreamFailed = (message = 'The model provider failed') => new AppError(502, 'UPSTREAM_FAILED', message);

export interface ErrorBody {
  success: false;
  message: string;
  error: { code: ErrorCode; details: ErrorDetail[] };
}

export const errorBody = (code: ErrorCode, message: string, details: ErrorDetail[] = []): ErrorBody => ({
  success: false,
  message,
  error: { code, details },
});

/**
 * A start-up failure whose message says what failed and where (a service out of reach, the embedded
 * database held by another process, demo data already there), with no credentials in it: the command
 * line prints the message alone, without a stack.
 */
export class StartupError extends Error {
  override name = 'StartupError';
}
