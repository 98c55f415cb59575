import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { failureMessage } from '../src/cli.js';
import { ConfigError, loadConfig } from '../src/config.js';

const base = { NODE_ENV: 'test', DATA_DIR: '/tmp/twin-cli-errors-unused', JWT_SECRET: 'cfg-secret-cfg-secret-cfg-secret-0123456789', ENCRYPTION_KEY: 'cfg-key-cfg-key-cfg-key-cfg-key-0123456789' };

/** The problems loadConfig reports for this environment (all at once), or [] when it accepts it. */
function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig({ ...base, ...env });
    return [];
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
}

describe('configuration checked at start', () => {
  test("a provider's variables set while another provider is chosen are warned about (the local models would answer)", () => {
    assert.deepEqual(loadConfig(base).warnings, []);
    assert.deepEqual(loadConfig({ ...base, LLM_BASE_URL: 'http://127.0.0.1:8000/v1', LLM_MODEL: 'gpt-4o-mini', EMBEDDINGS_MODEL_PATH: '/models/minilm' }).warnings, [
      'LLM_BASE_URL, LLM_MODEL are set but not used: LLM_PROVIDER=local',
      'EMBEDDINGS_MODEL_PATH is set but not used: EMBEDDINGS_PROVIDER=local',
    ]);
    const chosen = loadConfig({ ...base, LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: 'http://127.0.0.1:8000/v1', LLM_MODEL: 'm', EMBEDDINGS_PROVIDER: 'openai-compatible', EMBEDDINGS_BASE_URL: 'http://127.0.0.1:8000/v1', EMBEDDINGS_MODEL: 'e' });
    assert.deepEqual(chosen.warnings, []);
  });

  test('REDIS_URL must be a redis:// or rediss:// URL, reported with the other problems and without its password', () => {
    assert.deepEqual(problemsOf({ REDIS_URL: 'foo:bar', PORT: 'eighty' }).sort(), [
      'PORT must be an integer from 0 to 65535 (got "eighty")',
      'REDIS_URL must be a redis:// or rediss:// URL (got "foo:bar")',
    ]);
    assert.deepEqual(problemsOf({ REDIS_URL: 'http://:hunter2-secret@127.0.0.1:6379' }), ['REDIS_URL must be a redis:// or rediss:// URL (got "http://:***@127.0.0.1:6379")']);
    assert.deepEqual(problemsOf({ REDIS_URL: '127.0.0.1:6379' }), ['REDIS_URL must be a URL (got "127.0.0.1:6379")']);
    for (const ok of ['redis://127.0.0.1:6379', 'rediss://user:pw@cache.example.com:6380/2', 'redis://localhost']) assert.deepEqual(problemsOf({ REDIS_URL: ok }), [], ok);
  });

  test('EMBEDDINGS_PROVIDER=onnx needs EMBEDDINGS_MODEL_PATH to hold the model and its vocabulary (the files the embedder opens)', () => {
    const root = mkdtempSync(join(tmpdir(), 'twin-onnx-cfg-'));
    const dir = (name: string, files: string[]) => {
      const d = join(root, name);
      for (const f of files) {
        mkdirSync(join(d, f, '..'), { recursive: true });
        writeFileSync(join(d, f), '');
      }
      mkdirSync(d, { recursive: true });
      return d;
    };
    const onnx = (path: string) => problemsOf({ EMBEDDINGS_PROVIDER: 'onnx', EMBEDDINGS_MODEL_PATH: path });
    try {
      const missing = join(root, 'no-such-dir');
      assert.deepEqual(onnx(missing), [`EMBEDDINGS_MODEL_PATH ${missing} does not exist`]);
      const empty = dir('empty', []);
      assert.deepEqual(onnx(empty), [`EMBEDDINGS_MODEL_PATH ${empty} holds no model.onnx (nor onnx/model.onnx)`]);
      const noVocab = dir('no-vocab', ['model.onnx']);
      assert.deepEqual(onnx(noVocab), [`EMBEDDINGS_MODEL_PATH ${noVocab} has neither vocab.txt nor tokenizer.json`]);
      const notModel = join(dir('text', ['vocab.txt', 'notes.txt']), 'notes.txt');
      assert.deepEqual(onnx(notModel), [`EMBEDDINGS_MODEL_PATH ${notModel} is neither a directory nor a .onnx file`]);
      const modelDirNamedOnnx = dir('model-dir', ['model.onnx/readme.txt', 'vocab.txt']);
      assert.deepEqual(onnx(modelDirNamedOnnx), [`EMBEDDINGS_MODEL_PATH ${modelDirNamedOnnx} holds no model.onnx (nor onnx/model.onnx)`]);
      // the layouts the embedder reads
      assert.deepEqual(onnx(dir('flat', ['model.onnx', 'vocab.txt'])), []);
      assert.deepEqual(onnx(dir('hf', ['onnx/model.onnx', 'tokenizer.json'])), []);
      assert.deepEqual(onnx(join(dir('file', ['encoder.onnx', 'vocab.txt']), 'encoder.onnx')), []);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

/** An error shaped as Node's system errors are (code, syscall and where). */
const systemError = (message: string, fields: Record<string, unknown>): Error => Object.assign(new Error(message), fields);

/**
 * The command line's top level prints failureMessage(err) without a stack when it names the failure, the
 * stack only when it does not (a truly unexpected error). The process-level cases are in cli.test.ts; these
 * are the ones a test cannot provoke on 127.0.0.1 alone (DNS, privileges, a PostgreSQL that refuses).
 */
describe('failureMessage: one line for the failures an operator can act on', () => {
  const env = { DATABASE_URL: 'postgres://twin:pg-secret-pw@db.example.com:6543/twin', REDIS_URL: 'redis://:redis-secret-pw@cache.example.com:6380', HOST: 'api.example.com', PORT: '80' };

  test('listening: the address, and why it cannot be had', () => {
    assert.equal(
      failureMessage(systemError('listen EADDRINUSE: address already in use 127.0.0.1:3000', { code: 'EADDRINUSE', syscall: 'listen', address: '127.0.0.1', port: 3000 }), env),
      'Cannot listen on 127.0.0.1:3000 (HOST, PORT): the address is in use (EADDRINUSE)',
    );
    assert.match(
      failureMessage(systemError('listen EACCES: permission denied 0.0.0.0:80', { code: 'EACCES', syscall: 'listen', address: '0.0.0.0', port: 80 }), env)!,
      /^Cannot listen on 0\.0\.0\.0:80 \(HOST, PORT\): permission denied .*\(EACCES\)$/,
    );
    assert.equal(
      failureMessage(systemError('getaddrinfo ENOTFOUND api.example.com', { code: 'ENOTFOUND', syscall: 'getaddrinfo', hostname: 'api.example.com' }), env),
      'Cannot listen on HOST api.example.com: the host name does not resolve (ENOTFOUND)',
    );
  });

  test('the database and Redis are named by their variable and host, never with their credentials', () => {
    const messages = [
      failureMessage(systemError('connect ECONNREFUSED 10.0.0.5:6543', { code: 'ECONNREFUSED', syscall: 'connect', address: '10.0.0.5', port: 6543 }), env),
      failureMessage(systemError('getaddrinfo ENOTFOUND db.example.com', { code: 'ENOTFOUND', syscall: 'getaddrinfo', hostname: 'db.example.com' }), env),
      failureMessage(systemError('getaddrinfo EAI_AGAIN cache.example.com', { code: 'EAI_AGAIN', syscall: 'getaddrinfo', hostname: 'cache.example.com' }), env),
      failureMessage(Object.assign(new Error('password authentication failed for user "twin"'), { code: '28P01', severity: 'FATAL' }), env),
      failureMessage(Object.assign(new Error('database "twin" does not exist'), { code: '3D000', severity: 'FATAL' }), env),
    ];
    assert.deepEqual(messages, [
      'Cannot reach the database at DATABASE_URL db.example.com:6543 (ECONNREFUSED)',
      'Cannot reach the database at DATABASE_URL db.example.com: the host name does not resolve (ENOTFOUND)',
      'Cannot reach Redis at REDIS_URL cache.example.com: the host name does not resolve (EAI_AGAIN)',
      'The database at DATABASE_URL db.example.com:6543 refused the connection: password authentication failed for user "twin" (28P01)',
      'The database at DATABASE_URL db.example.com:6543 refused the connection: database "twin" does not exist (3D000)',
    ]);
    for (const m of messages) assert.doesNotMatch(m!, /secret/);
  });

  test('several addresses tried (AggregateError): the first one names the failure', () => {
    const refused = (address: string) => systemError(`connect ECONNREFUSED ${address}:5432`, { code: 'ECONNREFUSED', syscall: 'connect', address, port: 5432 });
    const err = Object.assign(new AggregateError([refused('::1'), refused('127.0.0.1')]), { code: 'ECONNREFUSED' });
    assert.equal(failureMessage(err, { DATABASE_URL: 'postgres://localhost/twin' }), 'Cannot reach the database at DATABASE_URL localhost:5432 (ECONNREFUSED)');
  });

  test('configuration problems are their list; anything else is unexpected (its stack is printed)', () => {
    assert.match(failureMessage(new ConfigError(['PORT must be an integer']), env)!, /^Invalid configuration:\n {2}- PORT must be an integer$/);
    assert.equal(failureMessage(new TypeError("Cannot read properties of undefined (reading 'id')"), env), undefined);
    assert.equal(failureMessage(systemError('EIO: i/o error, read', { code: 'EIO', syscall: 'read' }), env), undefined);
    assert.equal(failureMessage('a string', env), undefined);
  });
});
