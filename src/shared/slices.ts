/** Long synchronous runs broken into slices, with the event loop served between them. */

/** Resolves after the event loop has served what was waiting (I/O callbacks included). */
export const yieldToLoop = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/** How long a slice runs before it yields. */
const SLICE_MS = 8;

/** A check to call often in a long synchronous run: it yields to the event loop once SLICE_MS have passed since the last yield. */
export function slicer(): () => Promise<void> {
  let sliceStart = performance.now();
  return async () => {
    if (performance.now() - sliceStart < SLICE_MS) return;
    await yieldToLoop();
    sliceStart = performance.now();
  };
}
