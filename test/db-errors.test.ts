import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isLockConflict, isUniqueViolation, sqlState } from '../src/db/errors.js';

test("a database error's SQLSTATE is found through the wrappers' causes; Node's own error codes are not taken for one", () => {
  const wrapped = (code: string, depth: number): unknown => {
    let e: unknown = Object.assign(new Error('db'), { code });
    for (let i = 0; i < depth; i++) e = new Error('wrapper', { cause: e });
    return e;
  };
  assert.equal(sqlState(wrapped('23505', 0)), '23505');
  assert.equal(sqlState(wrapped('22P05', 2)), '22P05');
  // classes with letters: internal error, PL/pgSQL, feature not supported
  for (const code of ['XX000', 'P0001', '0A000']) assert.equal(sqlState(wrapped(code, 1)), code);
  // Node's system error codes are five capitals too
  for (const code of ['EPIPE', 'EBUSY', 'ECONNRESET', 'ERR_INVALID_ARG_TYPE', 'FST_ERR_CTP_INVALID_JSON_BODY']) assert.equal(sqlState(wrapped(code, 0)), undefined, code);
  assert.equal(sqlState(wrapped('23505', 5)), undefined, 'looked for a few levels only');
  assert.equal(sqlState('23505'), undefined);
  assert.ok(isUniqueViolation(wrapped('23505', 1)));
  assert.ok(isLockConflict(wrapped('55P03', 1)) && isLockConflict(wrapped('40P01', 0)));
  assert.ok(!isLockConflict(wrapped('23505', 0)));
});
