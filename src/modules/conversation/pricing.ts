import type { ModelPrice } from '../../config.js';
import type { TokenUsage } from '../../providers/llm/types.js';

/** Credits are kept to 4 decimals: all arithmetic here is in whole ten-thousandths ("units"). */
export const UNITS_PER_CREDIT = 10_000;

export const toCredits = (units: number): number => units / UNITS_PER_CREDIT;
/** A credit amount as the exact decimal text SQL receives (never a float in SQL arithmetic). */
export const unitsToDecimal = (units: number): string => {
  const sign = units < 0 ? '-' : '';
  const abs = Math.abs(units);
  return `${sign}${Math.floor(abs / UNITS_PER_CREDIT)}.${String(abs % UNITS_PER_CREDIT).padStart(4, '0')}`;
};

/** The units of a decimal credit amount as SQL returns it (`12.3400`, `-0.5000`), exactly: parsed as digits, not as a float. */
export const decimalToUnits = (text: string): number => {
  const m = /^(-?)(\d+)(?:\.(\d{0,4}))?$/.exec(text.trim());
  if (!m) throw new Error(`not a credit amount: ${text}`);
  const units = Number(m[2]) * UNITS_PER_CREDIT + Number((m[3] ?? '').padEnd(4, '0'));
  return m[1] ? -units : units;
};

/** The price of a model: its MODEL_PRICES entry, else the "*" entry, else 1 / 2 credits per 1k tokens. */
export function priceFor(model: string, prices: Record<string, ModelPrice>): ModelPrice {
  return prices[model] ?? prices['*'] ?? { input: 1, output: 2 };
}

/** Exact costs are kept in hundred-thousandths of a unit until the one rounding of a charge. */
const SCALE = 100_000;

/**
 * The exact cost of input and output tokens at a price (credits per 1,000 tokens), less the price's discount
 * percent, in units × SCALE: not rounded, so that the calls of one answer (tool rounds) add up before the
 * charge is rounded once (contract §6: a charge is rounded up to 0.0001 credit).
 */
export function exactCost(inputTokens: number, outputTokens: number, price: ModelPrice): number {
  // price × tokens / 1000 credits = price × tokens × 10 units; computed on integers of 1e-6 price steps.
  const inMicro = Math.round(price.input * 1_000_000);
  const outMicro = Math.round(price.output * 1_000_000);
  const discount = Math.round((price.discount ?? 0) * 100); // in 1/100 percent, 0..10000
  // units × 1e5 (micro price × tokens × 10 / 1e6 × 1e5 = micro × tokens): integers until the division.
  const grossScaled = inMicro * Math.max(0, inputTokens) + outMicro * Math.max(0, outputTokens);
  return (grossScaled * (10_000 - discount)) / 10_000;
}

/** An exact cost (exactCost, or a sum of them) as a charge: rounded UP to the next unit (0.0001 credit). */
export const chargeUnits = (exact: number): number => Math.max(0, Math.ceil(exact / SCALE - 1e-9));

/** Cost in units of input and output tokens at a price, rounded up to the next 0.0001 credit (contract §6). */
export function costUnits(inputTokens: number, outputTokens: number, price: ModelPrice): number {
  return chargeUnits(exactCost(inputTokens, outputTokens, price));
}

export function exactCostOfUsage(usage: TokenUsage, price: ModelPrice): number {
  return exactCost(usage.inputTokens, usage.outputTokens, price);
}

/**
 * The most a call can cost: its input tokens (as we count them, plus a margin of 10% and 16 tokens,
 * since a provider's tokenizer may count a little more) and the whole completion budget.
 */
export function maxCostUnits(inputTokens: number, maxCompletionTokens: number, price: ModelPrice): number {
  return costUnits(Math.ceil(inputTokens * 1.1) + 16, maxCompletionTokens, price);
}
