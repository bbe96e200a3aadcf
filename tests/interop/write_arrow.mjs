// Writes Arrow IPC payloads with apache-arrow (the JS implementation) for
// tests/parquet_interop_test.cc's Arrow IPC tests and the KafkaDataset tests.
//
// Usage:
//   node write_arrow.mjs dataset OUT_DIR
//     the interop dataset (canonical.mjs) as stream.arrows (schema + one batch),
//     two_batches.arrows (schema + batches of rows [0, 10) and [10, 23), written from slices),
//     lone_batch.bin (a record-batch message without its schema) and manifest.json.
//   node write_arrow.mjs messages IN.parquet OUT_DIR ROWS_PER_MESSAGE stream|lone
//     IN.parquet (read with parquet-wasm) cut into messages of ROWS_PER_MESSAGE rows, each an
//     IPC stream or a lone record-batch message: OUT_DIR/msg-<n>.bin.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import * as arrow from 'apache-arrow';
import * as pw from 'parquet-wasm/node';

import { arrowTable } from './arrow_table.mjs';
import { KINDS, canonicalColumns, makeColumns, toJson } from './canonical.mjs';

// The bytes of a stream after its first message (the schema): record batches and the end marker.
function withoutSchema(stream) {
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  if (view.getInt32(0, true) !== -1) throw new Error('expected a continuation marker');
  const metadataLength = view.getInt32(4, true);
  return stream.slice(8 + metadataLength);  // a schema message has no body
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'dataset') {
  const [outDir] = args;
  const ROWS = 23;
  const columns = makeColumns(ROWS);
  const table = arrowTable(columns, ROWS);
  const stream = arrow.tableToIPC(table, 'stream');
  writeFileSync(join(outDir, 'stream.arrows'), stream);
  const batch = table.batches[0];
  const two = new arrow.Table([batch.slice(0, 10), batch.slice(10, ROWS)]);
  writeFileSync(join(outDir, 'two_batches.arrows'), arrow.tableToIPC(two, 'stream'));
  writeFileSync(join(outDir, 'lone_batch.bin'), withoutSchema(stream));
  writeFileSync(join(outDir, 'manifest.json'), toJson({ rows: ROWS, kinds: KINDS, expected: canonicalColumns(columns) }));
} else if (mode === 'messages') {
  const [input, outDir, rowsText, form] = args;
  const perMessage = Number(rowsText);
  const wasmTable = pw.readParquet(readFileSync(input));
  const table = arrow.tableFromIPC(wasmTable.intoIPCStream());
  mkdirSync(outDir, { recursive: true });
  let n = 0;
  for (let begin = 0; begin < table.numRows; begin += perMessage, ++n) {
    const stream = arrow.tableToIPC(table.slice(begin, Math.min(begin + perMessage, table.numRows)), 'stream');
    const bytes = form === 'lone' ? withoutSchema(stream) : stream;
    writeFileSync(join(outDir, `msg-${String(n).padStart(5, '0')}.bin`), bytes);
  }
  console.log(n);
} else {
  throw new Error('usage: node write_arrow.mjs dataset OUT_DIR | messages IN.parquet OUT_DIR ROWS stream|lone');
}
