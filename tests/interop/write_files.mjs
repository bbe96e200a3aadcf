// Writes the interop test files with two independent Parquet writers, parquet-wasm (Apache
// arrow-rs compiled to wasm) and hyparquet-writer, across codecs, page versions, dictionary
// on/off and the non-default encodings, plus manifest.json with the expected values.
//
// Usage: node write_files.mjs OUT_DIR
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync, brotliCompressSync } from 'node:zlib';

import * as arrow from 'apache-arrow';
import { parquetWriteBuffer } from 'hyparquet-writer';
import * as pw from 'parquet-wasm/node';

import { arrowTable } from './arrow_table.mjs';
import { KINDS, canonicalColumns, makeColumns, toJson } from './canonical.mjs';

const outDir = process.argv[2];
if (!outDir) throw new Error('usage: node write_files.mjs OUT_DIR');
const ROWS = 23;
const columns = makeColumns(ROWS);
const files = [];

// ------------------------------------------------------------------------- parquet-wasm

const wasmCodecs = { UNCOMPRESSED: pw.Compression.UNCOMPRESSED, SNAPPY: pw.Compression.SNAPPY,
  GZIP: pw.Compression.GZIP, ZSTD: pw.Compression.ZSTD, LZ4_RAW: pw.Compression.LZ4_RAW };
const ipc = arrow.tableToIPC(arrowTable(columns, ROWS), 'stream');

function writeWasm(file, codec, configure) {
  const table = pw.Table.fromIPCStream(ipc);
  let builder = new pw.WriterPropertiesBuilder()
    .setCompression(codec)
    .setMaxRowGroupSize(10)  // several row groups
    .setWriteBatchSize(4)
    .setDataPageSizeLimit(64);  // several pages per chunk
  builder = configure(builder);
  writeFileSync(join(outDir, file), pw.writeParquet(table, builder.build()));
}

for (const [codecName, codec] of Object.entries(wasmCodecs)) {
  for (const version of ['V1', 'V2']) {
    for (const dictionary of [true, false]) {
      const file = `wasm_${codecName}_${version}_${dictionary ? 'dict' : 'plain'}.parquet`;
      writeWasm(file, codec, b => b.setWriterVersion(pw.WriterVersion[version]).setDictionaryEnabled(dictionary));
      files.push({ file, writer: 'parquet-wasm', codec: codecName, variant: `${version} ${dictionary ? 'dictionary' : 'plain'}` });
    }
  }
}
// Non-default encodings (arrow-rs applies them to top-level columns only).
for (const [variant, stringEncoding] of [['delta', pw.Encoding.DELTA_BYTE_ARRAY],
  ['delta-length', pw.Encoding.DELTA_LENGTH_BYTE_ARRAY]]) {
  for (const version of ['V1', 'V2']) {
    const file = `wasm_ZSTD_${version}_${variant}.parquet`;
    writeWasm(file, pw.Compression.ZSTD, b => b.setWriterVersion(pw.WriterVersion[version])
      .setDictionaryEnabled(false)
      .setColumnEncoding('i32', pw.Encoding.DELTA_BINARY_PACKED)
      .setColumnEncoding('i64', pw.Encoding.DELTA_BINARY_PACKED)
      .setColumnEncoding('i64req', pw.Encoding.DELTA_BINARY_PACKED)
      .setColumnEncoding('str', stringEncoding)
      .setColumnEncoding('f32', pw.Encoding.BYTE_STREAM_SPLIT)
      .setColumnEncoding('f64', pw.Encoding.BYTE_STREAM_SPLIT)
      .setColumnEncoding('b', pw.Encoding.RLE));
    files.push({ file, writer: 'parquet-wasm', codec: 'ZSTD', variant: `${version} ${variant}` });
  }
}

// ---------------------------------------------------------------------- hyparquet-writer

const leaf = (name, type, extra = {}) => ({ name, repetition_type: 'OPTIONAL', ...type, ...extra });
const INT64 = { type: 'INT64' };
const STRING = { type: 'BYTE_ARRAY', converted_type: 'UTF8' };
const list = (name, children) => [
  { name, repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  ...children,
];
const map = (name, key, value) => [
  { name, repetition_type: 'OPTIONAL', converted_type: 'MAP', num_children: 1 },
  { name: 'key_value', repetition_type: 'REPEATED', num_children: 2 },
  { name: 'key', repetition_type: 'REQUIRED', ...key },
  { name: 'value', repetition_type: 'OPTIONAL', ...value },
];
const hyparquetSchema = [
  { name: 'root', num_children: Object.keys(KINDS).length },
  leaf('i32', { type: 'INT32' }),
  leaf('i64', INT64),
  { name: 'i64req', repetition_type: 'REQUIRED', type: 'INT64' },
  leaf('f32', { type: 'FLOAT' }),
  leaf('f64', { type: 'DOUBLE' }),
  leaf('str', STRING),
  leaf('b', { type: 'BOOLEAN' }),
  ...list('li64', [leaf('element', INT64)]),
  ...list('lstr', [leaf('element', STRING)]),
  ...list('llist', [{ name: 'element', repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
    { name: 'list', repetition_type: 'REPEATED', num_children: 1 }, leaf('element', INT64)]),
  ...map('mstrf64', STRING, { type: 'DOUBLE' }),
  ...map('mi64str', INT64, STRING),
];
// Order of the schema's top-level fields.
const hyparquetOrder = ['i32', 'i64', 'i64req', 'f32', 'f64', 'str', 'b', 'li64', 'lstr', 'llist', 'mstrf64', 'mi64str'];

const hyparquetVariants = {
  default: {},
  dictionary: { i32: 'RLE_DICTIONARY', i64: 'RLE_DICTIONARY', str: 'RLE_DICTIONARY', li64: 'RLE_DICTIONARY', lstr: 'RLE_DICTIONARY' },
  plain: Object.fromEntries(hyparquetOrder.map(n => [n, 'PLAIN'])),
  delta: { i32: 'DELTA_BINARY_PACKED', i64: 'DELTA_BINARY_PACKED', i64req: 'DELTA_BINARY_PACKED',
    li64: 'DELTA_BINARY_PACKED', llist: 'DELTA_BINARY_PACKED', str: 'DELTA_BYTE_ARRAY',
    lstr: 'DELTA_BYTE_ARRAY', f32: 'BYTE_STREAM_SPLIT', f64: 'BYTE_STREAM_SPLIT', b: 'RLE' },
  'delta-length': { str: 'DELTA_LENGTH_BYTE_ARRAY', lstr: 'DELTA_LENGTH_BYTE_ARRAY', b: 'RLE' },
};
const hyparquetCodecs = {
  UNCOMPRESSED: {},
  SNAPPY: {},
  GZIP: { GZIP: input => new Uint8Array(gzipSync(input)) },
};

function writeHyparquet(file, codec, compressors, encodings) {
  const buffer = parquetWriteBuffer({
    columnData: hyparquetOrder.map(name => ({
      name, data: columns[name], ...(encodings[name] ? { encoding: encodings[name] } : {}),
    })),
    schema: hyparquetSchema,
    codec,
    compressors,
    rowGroupSize: 9,
    pageSize: 40,
  });
  writeFileSync(join(outDir, file), new Uint8Array(buffer));
}

for (const [codec, compressors] of Object.entries(hyparquetCodecs)) {
  for (const [variant, encodings] of Object.entries(hyparquetVariants)) {
    const file = `hyparquet_${codec}_${variant}.parquet`;
    writeHyparquet(file, codec, compressors, encodings);
    files.push({ file, writer: 'hyparquet-writer', codec, variant: `V2 ${variant}` });
  }
}

// Files our reader must reject with "not supported yet".
writeHyparquet('unsupported_BROTLI.parquet', 'BROTLI', { BROTLI: input => new Uint8Array(brotliCompressSync(input)) }, {});
writeWasm('unsupported_LZ4.parquet', pw.Compression.LZ4, b => b);

writeFileSync(join(outDir, 'manifest.json'), toJson({
  rows: ROWS, kinds: KINDS, expected: canonicalColumns(columns), files,
  unsupported: [{ file: 'unsupported_BROTLI.parquet', codec: 'BROTLI' }, { file: 'unsupported_LZ4.parquet', codec: 'LZ4' }],
}));
