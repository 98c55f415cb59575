/**
 * Bounds on the body of an HTTP response from outside (a model provider, a moderation endpoint): at most
 * `maxBytes` bytes, and, when a deadline is given, complete within `deadlineMs` of its headers. A fetch's
 * body is counted as it is read, after content decoding (what a gzip answer inflates to is what counts);
 * past a bound the body errors and its source is cancelled, which closes the connection: what a
 * misbehaving endpoint sends beyond the bound is never read, let alone kept.
 */

const KiB = 1024;
const MiB = 1024 * KiB;

/** A byte count for messages: "16 MiB", "24.4 MiB", "64 KiB", "100 bytes". */
export function byteSize(n: number): string {
  const unit = (size: number, name: string) => `${n % size === 0 ? n / size : (n / size).toFixed(1)} ${name}`;
  if (n >= MiB) return unit(MiB, 'MiB');
  if (n >= KiB) return unit(KiB, 'KiB');
  return `${n} bytes`;
}

export interface BodyBounds {
  /** The most bytes the body may have. */
  maxBytes: number;
  /** The whole body must have come within this many ms of the headers; none: its reader bounds the time (a stream's stall timeout). */
  deadlineMs?: number;
  /** The error a body larger than maxBytes ends with. */
  tooLarge(): Error;
  /** The error a body still coming at the deadline ends with. */
  tooSlow?(): Error;
}

/** Statuses whose response has no body (the Response constructor refuses one for them). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * `source` read through the bounds: the same bytes, until more than `maxBytes` came (it then errors with
 * `tooLarge()`) or the deadline passed (`tooSlow()`); either way `source` is cancelled. `onBreach` learns the
 * error first: a reader may wrap or swallow it (the OpenAI SDK makes a failed error body the text of an APIError).
 */
export function boundedStream(source: ReadableStream<Uint8Array>, bounds: BodyBounds, onBreach: (err: Error) => void = () => undefined): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let received = 0;
  let timer: NodeJS.Timeout | undefined;
  let ended = false;
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const breach = (err: Error) => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    onBreach(err);
    controller.error(err);
    reader.cancel(err).catch(() => undefined);
  };
  return new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        if (bounds.deadlineMs !== undefined) {
          const tooSlow = bounds.tooSlow ?? (() => new Error(`The response body did not come within ${bounds.deadlineMs} ms`));
          // the body's own socket keeps the process up while it is read; the guard of a body nobody reads does not
          timer = setTimeout(() => breach(tooSlow()), bounds.deadlineMs).unref();
        }
      },
      async pull(c) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (!ended) {
            ended = true;
            clearTimeout(timer);
            c.error(err);
          }
          return;
        }
        if (ended) return; // a breach while the read was pending: the stream has its error already
        if (chunk.done) {
          ended = true;
          clearTimeout(timer);
          c.close();
          return;
        }
        received += chunk.value.byteLength;
        if (received > bounds.maxBytes) return breach(bounds.tooLarge());
        c.enqueue(chunk.value);
      },
      cancel(reason) {
        ended = true;
        clearTimeout(timer);
        return reader.cancel(reason);
      },
    },
    // nothing is read ahead of the consumer: what is counted is what it asked for
    { highWaterMark: 0 },
  );
}

/** `response` with its body read through `bounds` (status and headers as they were). */
export function boundedResponse(response: Response, bounds: BodyBounds, onBreach?: (err: Error) => void): Response {
  if (!response.body || NULL_BODY.has(response.status)) return response;
  return new Response(boundedStream(response.body, bounds, onBreach), { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** A fetch whose responses have bounded bodies, and the first bound one of them broke. */
export interface BoundedFetch {
  fetch: typeof fetch;
  /** The error of the first bound broken, if one was: the call's failure, whatever its reader made of it. */
  breach(): Error | undefined;
}

/** A fetch (`fetchImpl`, by default the global one) whose each response body is read through `boundsFor(response)`. */
export function boundedFetch(boundsFor: (response: Response) => BodyBounds, fetchImpl: typeof fetch = (input, init) => fetch(input, init)): BoundedFetch {
  let first: Error | undefined;
  const onBreach = (err: Error) => {
    first ??= err;
  };
  return {
    fetch: async (input, init) => {
      const response = await fetchImpl(input, init);
      return boundedResponse(response, boundsFor(response), onBreach);
    },
    breach: () => first,
  };
}

/** The body of `response` as UTF-8 text, at most `bounds.maxBytes` bytes (else `bounds.tooLarge()` is thrown). */
export async function readBoundedText(response: Response, bounds: BodyBounds): Promise<string> {
  return boundedResponse(response, bounds).text();
}
