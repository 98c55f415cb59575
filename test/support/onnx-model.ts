/**
 * Writes a tiny ONNX sentence-embedding model by hand (protobuf wire format, no tool): inputs
 * `input_ids` and `attention_mask` (int64 [batch, seq]), one Gather of a [vocab, dim] embedding table,
 * output `last_hidden_state` (float [batch, seq, dim]). With mean pooling that is a bag-of-tokens model
 * whose every vector the test can compute by hand.
 */

function varint(n: number | bigint): number[] {
  let v = BigInt(n);
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return out;
}

const key = (field: number, wire: number) => varint((field << 3) | wire);
const int = (field: number, n: number) => [...key(field, 0), ...varint(n)];
const bytes = (field: number, data: Uint8Array | number[]) => [...key(field, 2), ...varint(data.length), ...data];
const str = (field: number, s: string) => bytes(field, [...new TextEncoder().encode(s)]);

/** TypeProto.Tensor with a shape of named (symbolic) or fixed dimensions. */
function tensorType(elemType: number, dims: Array<string | number>): number[] {
  const shape = dims.flatMap((d) => bytes(1, typeof d === 'string' ? str(2, d) : int(1, d)));
  return bytes(1, [...int(1, elemType), ...bytes(2, shape)]);
}

const valueInfo = (name: string, elemType: number, dims: Array<string | number>) => [...str(1, name), ...bytes(2, tensorType(elemType, dims))];

const FLOAT = 1;
const INT64 = 7;

export function tinyEmbeddingModel(table: number[][]): Uint8Array {
  const vocab = table.length;
  const dim = table[0]!.length;
  const raw = new Uint8Array(new Float32Array(table.flat()).buffer);
  const initializer = [...int(1, vocab), ...int(1, dim), ...int(2, FLOAT), ...str(8, 'embeddings'), ...bytes(9, raw)];
  const node = [...str(1, 'embeddings'), ...str(1, 'input_ids'), ...str(2, 'last_hidden_state'), ...str(3, 'gather'), ...str(4, 'Gather')];
  const graph = [
    ...bytes(1, node),
    ...str(2, 'tiny-encoder'),
    ...bytes(5, initializer),
    ...bytes(11, valueInfo('input_ids', INT64, ['batch', 'seq'])),
    ...bytes(11, valueInfo('attention_mask', INT64, ['batch', 'seq'])),
    ...bytes(12, valueInfo('last_hidden_state', FLOAT, ['batch', 'seq', dim])),
  ];
  const opset = [...str(1, ''), ...int(2, 13)];
  const model = [...int(1, 8), ...str(2, 'twin-test'), ...bytes(7, graph), ...bytes(8, opset)];
  return new Uint8Array(model);
}
