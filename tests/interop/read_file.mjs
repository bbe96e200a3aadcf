// Reads a Parquet file with two independent readers, parquet-wasm (arrow-rs) and hyparquet,
// and prints {"parquet-wasm": {column: [canonical rows]}, "hyparquet": {...}} on stdout (a
// reader's failure is reported as {"error": "..."} in its place).
//
// Usage: node read_file.mjs FILE.parquet KINDS.json   (KINDS.json: {"column": "kind", ...})
import { readFileSync } from 'node:fs';

import { tableFromIPC } from 'apache-arrow';
import { parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import * as pw from 'parquet-wasm/node';

import { canonical, toJson } from './canonical.mjs';

const [file, kindsFile] = process.argv.slice(2);
if (!file || !kindsFile) throw new Error('usage: node read_file.mjs FILE KINDS.json');
const kinds = JSON.parse(readFileSync(kindsFile, 'utf8'));
const bytes = readFileSync(file);

function viaParquetWasm() {
  const table = tableFromIPC(pw.readParquet(new Uint8Array(bytes)).intoIPCStream());
  const result = {};
  for (const name of Object.keys(kinds)) {
    const column = table.getChild(name);
    if (!column) throw new Error(`no column ${name}`);
    result[name] = Array.from({ length: table.numRows }, (_, i) => canonical(kinds[name], column.get(i)));
  }
  return result;
}

async function viaHyparquet() {
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const rows = await parquetReadObjects({ file: buffer, compressors });
  const result = {};
  for (const name of Object.keys(kinds)) result[name] = rows.map(row => canonical(kinds[name], row[name]));
  return result;
}

const output = {};
try {
  output['parquet-wasm'] = viaParquetWasm();
} catch (e) {
  output['parquet-wasm'] = { error: String(e && e.message ? e.message : e) };
}
try {
  output.hyparquet = await viaHyparquet();
} catch (e) {
  output.hyparquet = { error: String(e && e.message ? e.message : e) };
}
process.stdout.write(toJson(output));
