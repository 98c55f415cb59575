import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCollection, ndcgAt } from '../scripts/eval-search.js';

/**
 * `npm run eval:search` reads any collection in the SMART layout, not Cranfield alone (issue 8: the script is
 * run on collections the project has not seen). Small collections written here in the layouts of the classic
 * ones: file names, judgement columns, id padding and encodings as those collections have them.
 */
function collection(files: Record<string, string | Buffer>): string {
  const dir = mkdtempSync(join(tmpdir(), 'eval-reader-'));
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
  return dir;
}

const judged = (c: ReturnType<typeof loadCollection>, key: string) => Object.fromEntries(c.qrels.get(key) ?? new Map());

test('CACM: query.text and qrels.text, judgements with zero-padded query numbers and extra columns, documents with a title only', () => {
  const dir = collection({
    'cacm.all': '.I 1\n.T\nPreliminary Report-International Algebraic Language\n.B\nCACM December, 1958\n.A\nPerlis, A. J.\n.N\nCA581203 JB March 22, 1978\n.X\n100\t5\t1\n' +
      '.I 2\n.T\nExtraction of Roots by Repeated Subtractions\n.W\nA method for digital computers.\n.B\nCACM December, 1958\n',
    'query.text': '.I 1\n.W\n What articles exist which deal with TSS (Time Sharing System)?\n.N\n 1. Richard Alexander\n.I 2\n.W\nroots by subtraction\n',
    'qrels.text': '01 1 0 0\n02 2 0 0\n02 1 0 0\n',
  });
  try {
    const c = loadCollection(dir);
    assert.deepEqual(c.docs, [
      { id: '1', text: 'Preliminary Report-International Algebraic Language' },
      { id: '2', text: 'Extraction of Roots by Repeated Subtractions\n\nA method for digital computers.' },
    ]);
    assert.deepEqual(
      c.queries.map((q) => [q.key, q.text]),
      [
        ['1', 'What articles exist which deal with TSS (Time Sharing System)?'],
        ['2', 'roots by subtraction'],
      ],
    );
    assert.deepEqual(judged(c, '1'), { '1': 1 });
    assert.deepEqual(judged(c, '2'), { '1': 1, '2': 1 });
    assert.equal(ndcgAt(['2', '1'], c.qrels.get('2')!), 1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('MED: upper-case names, TREC judgements (query 0 doc grade), a Latin-1 file', () => {
  const dir = collection({
    'MED.ALL': Buffer.from('.I 1\n.W\ncorrelation between maternal and fetal plasma levels of glucose\n.I 2\n.W\nthe caf\xe9 au lait spots of neurofibromatosis\n', 'latin1'),
    'MED.QRY': '.I 1\n.W\nthe crystalline lens in vertebrates\n.I 2\n.W\nneurofibromatosis skin spots\n',
    'MED.REL': '1 0 1 1\n2 0 2 1\n2 0 1 0\n',
  });
  try {
    const c = loadCollection(dir);
    assert.equal(c.docs[1]!.text, 'the café au lait spots of neurofibromatosis');
    assert.deepEqual(judged(c, '1'), { '1': 1 });
    assert.deepEqual(judged(c, '2'), { '2': 1 }, 'a grade of 0 is not relevant');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('CISI: cross-reference fields left out, binary judgements with a score column, a query with a title and no text, UTF-8 text', () => {
  const dir = collection({
    'CISI.ALL': '.I 1\n.T\n18 Editions of the Dewey Decimal Classifications\n.A\nComaromi, J.P.\n.W\n   The present study is a history of the DEWEY Decimal\nClassification.\n.X\n1\t5\t1\n92\t1\t1\n.I 2\n.T\nUse Made of Technical Libraries\n.W\nThis report is an analysis of 6300 acts of use — in 104 technical libraries.\n.X\n2\t1\t2\n',
    'CISI.QRY': '.I 1\n.W\nWhat problems and concerns are there in making up descriptive titles?\n.I 2\n.T\nLibraries of technical information\n.A\nSomeone\n',
    'CISI.REL': '     1      1 0 0.000000\n     2      2 0 0.000000\n',
  });
  try {
    const c = loadCollection(dir);
    assert.equal(c.docs[0]!.text, '18 Editions of the Dewey Decimal Classifications\n\n   The present study is a history of the DEWEY Decimal\nClassification.');
    assert.match(c.docs[1]!.text, /acts of use — in 104/);
    assert.deepEqual(
      c.queries.map((q) => q.text),
      ['What problems and concerns are there in making up descriptive titles?', 'Libraries of technical information'],
    );
    assert.deepEqual(judged(c, '1'), { '1': 1 });
    assert.deepEqual(judged(c, '2'), { '2': 1 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('Cranfield: query numbers are positions where the .I ids skip numbers; graded codes 1..4 give 5 - code, -1 nothing', () => {
  const dir = collection({
    'cran.all.1400': '.I 1\n.T\nexperimental investigation of the aerodynamics of a wing in a slipstream .\n.A\nbrenckman,m.\n.B\nj. ae. scs. 25, 1958, 324.\n.W\nan experimental study of a wing in a propeller slipstream .\n.I 2\n.T\nsimple shear flow past a flat plate .\n.W\nthe flow past a flat plate .\n',
    'cran.qry': '.I 001\n.W\nwhat similarity laws must be obeyed ?\n.I 002\n.W\nwhat are the structural and aeroelastic problems ?\n.I 004\n.W\nflat plate shear flow\n',
    cranqrel: '1 1 2\n3 2 1\n3 1 -1\n',
  });
  try {
    const c = loadCollection(dir);
    assert.equal(c.byPosition, true);
    assert.deepEqual(
      c.queries.map((q) => [q.id, q.key]),
      [
        ['1', '1'],
        ['2', '2'],
        ['4', '3'],
      ],
    );
    assert.deepEqual(judged(c, '1'), { '1': 3 });
    assert.deepEqual(judged(c, '3'), { '2': 4 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
