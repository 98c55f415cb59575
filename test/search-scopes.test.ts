import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sameScope, ScopeCache, UploadRowCache } from '../src/modules/search/scopes.js';
import type { ScopeUpload } from '../src/modules/search/search.repository.js';
import type { UploadRow } from '../src/modules/vault/uploads.repository.js';

/** The held scopes' bounds and the comparison that decides whether a search may keep what it ranked over one. */

const upload = (id: string, version: number | null = 1, chunks = 10, lexLen = 100, row = '100'): ScopeUpload => ({ id, version, chunks, lexLen, row });

describe('sameScope', () => {
  test('the same uploads in another order, with the same versions and sizes, are the same scope', () => {
    assert.equal(sameScope([upload('a'), upload('b', 2)], [upload('b', 2), upload('a')]), true);
    assert.equal(sameScope([], []), true);
  });

  test('an upload more, less or another, a version, a chunk count or a length that moved: another scope', () => {
    const base = [upload('a'), upload('b')];
    assert.equal(sameScope(base, [upload('a')]), false);
    assert.equal(sameScope(base, [...base, upload('c')]), false);
    assert.equal(sameScope(base, [upload('a'), upload('c')]), false);
    assert.equal(sameScope(base, [upload('a'), upload('b', 2)]), false);
    assert.equal(sameScope(base, [upload('a'), upload('b', null)]), false);
    assert.equal(sameScope(base, [upload('a'), upload('b', 1, 11)]), false);
    assert.equal(sameScope(base, [upload('a'), upload('b', 1, 10, 101)]), false);
  });
});

describe('ScopeCache', () => {
  test('the key is that of the SQL text and its parameters', () => {
    const k = ScopeCache.keyOf({ sql: 'u.owner = $1', params: ['x'] });
    assert.equal(k, ScopeCache.keyOf({ sql: 'u.owner = $1', params: ['x'] }));
    assert.notEqual(k, ScopeCache.keyOf({ sql: 'u.owner = $1', params: ['y'] }));
    assert.notEqual(k, ScopeCache.keyOf({ sql: 'u.owner <> $1', params: ['x'] }));
    assert.notEqual(ScopeCache.keyOf({ sql: 'a', params: ['b'] }), ScopeCache.keyOf({ sql: 'a"b', params: [] }));
  });

  test('bounded by keys, least recently used first', () => {
    const cache = new ScopeCache({ maxKeys: 2, maxUploads: 100 });
    cache.set('one', [upload('a')]);
    cache.set('two', [upload('b')]);
    assert.ok(cache.get('one')); // now the most recently used
    cache.set('three', [upload('c')]);
    assert.equal(cache.get('two'), undefined);
    assert.deepEqual(cache.get('one'), [upload('a')]);
    assert.deepEqual(cache.get('three'), [upload('c')]);
  });

  test('bounded by the uploads held across keys; a scope larger than the bound is not held; a key set again replaces its scope', () => {
    const cache = new ScopeCache({ maxKeys: 10, maxUploads: 4 });
    cache.set('one', [upload('a'), upload('b')]);
    cache.set('two', [upload('c'), upload('d')]);
    cache.set('three', [upload('e')]);
    assert.equal(cache.get('one'), undefined);
    assert.ok(cache.get('two') && cache.get('three'));
    cache.set('huge', [1, 2, 3, 4, 5].map((i) => upload(String(i))));
    assert.equal(cache.get('huge'), undefined);
    assert.ok(cache.get('two') && cache.get('three'));
    // replacing a scope counts its uploads once: 'two' (now 3) + 'three' (1) = 4 fit
    cache.set('two', [upload('c'), upload('d'), upload('f')]);
    assert.equal(cache.get('two')?.length, 3);
    assert.ok(cache.get('three'));
  });
});

describe('UploadRowCache', () => {
  const row = (id: string, title = id) => ({ id, fileTitle: title }) as unknown as UploadRow;

  test('a row is taken only at the version of the row that the search\'s scope read, and only for a file of that scope', () => {
    const cache = new UploadRowCache();
    const first = cache.sourceFor([upload('a', 1, 10, 100, '7'), upload('b', 1, 10, 100, '8')]);
    assert.equal(first.held('a'), undefined);
    first.remember(row('a'), '7');
    first.remember(row('c'), '3');
    assert.equal(first.held('a')?.id, 'a');
    assert.deepEqual(cache.stats, { held: 1, read: 1 });
    // the next search read another version of a's row (it was updated): read again
    const next = cache.sourceFor([upload('a', 1, 10, 100, '9')]);
    assert.equal(next.held('a'), undefined);
    // c is held, but not in this scope (it entered after the scope statement, or left): read
    assert.equal(next.held('c'), undefined);
    next.remember(row('a', 'renamed'), '9');
    assert.equal(next.held('a')?.fileTitle, 'renamed');
    // the old version is not held any more
    assert.equal(first.held('a'), undefined);
    assert.deepEqual(cache.stats, { held: 2, read: 4 });
  });

  test('bounded by rows, least recently used first', () => {
    const cache = new UploadRowCache(2);
    const scope = cache.sourceFor(['a', 'b', 'c'].map((id) => upload(id, 1, 10, 100, '1')));
    scope.remember(row('a'), '1');
    scope.remember(row('b'), '1');
    assert.ok(scope.held('a')); // now the most recently used
    scope.remember(row('c'), '1');
    assert.equal(scope.held('b'), undefined);
    assert.ok(scope.held('a') && scope.held('c'));
  });
});
