// Shared by the interop scripts: the test dataset and the canonical JSON form of values that
// tests/parquet_interop_test.cc compares against.
//
// Canonical form: integers are decimal strings (int64 does not fit a JSON number), floats are
// JSON numbers except "NaN"/"Infinity"/"-Infinity"/"-0", booleans are true/false, strings are
// strings, lists are arrays, maps are arrays of [key, value] pairs in file order, null is null.
// A column's kind is "int", "float", "bool", "string", "list<K>" or "map<K,V>".

export const KINDS = {
  i32: 'int',
  i64: 'int',
  i64req: 'int',
  f32: 'float',
  f64: 'float',
  str: 'string',
  b: 'bool',
  li64: 'list<int>',
  lstr: 'list<string>',
  llist: 'list<list<int>>',
  mstrf64: 'map<string,float>',
  mi64str: 'map<int,string>',
};

function splitMapKind(inner) {
  // "K,V" where K is a primitive kind (no commas inside it).
  const comma = inner.indexOf(',');
  return [inner.slice(0, comma), inner.slice(comma + 1)];
}

function mapEntries(value) {
  if (value instanceof Map) return [...value.entries()];
  if (Array.isArray(value)) return value.map(e => (Array.isArray(e) ? e : [e.key, e.value]));
  if (typeof value[Symbol.iterator] === 'function') return [...value];  // Arrow MapRow
  return Object.entries(value);  // hyparquet reads maps as plain objects
}

export function canonical(kind, value) {
  if (value === null || value === undefined) return null;
  if (kind === 'int') return BigInt(value).toString();
  if (kind === 'float') {
    const number = Number(value);
    if (Number.isNaN(number)) return 'NaN';
    if (number === Infinity) return 'Infinity';
    if (number === -Infinity) return '-Infinity';
    if (Object.is(number, -0)) return '-0';  // JSON would print 0
    return number;
  }
  if (kind === 'bool') return Boolean(value);
  if (kind === 'string') return String(value);
  if (kind.startsWith('list<')) {
    const item = kind.slice(5, -1);
    return Array.from(value, v => canonical(item, v));
  }
  if (kind.startsWith('map<')) {
    const [keyKind, valueKind] = splitMapKind(kind.slice(4, -1));
    return mapEntries(value).map(([k, v]) => [canonical(keyKind, k), canonical(valueKind, v)]);
  }
  throw new Error(`unknown kind ${kind}`);
}

// Deterministic rows with nulls, empty lists, extremes and repeats (so dictionaries are used).
export function makeColumns(n) {
  const columns = Object.fromEntries(Object.keys(KINDS).map(name => [name, []]));
  for (let i = 0; i < n; ++i) {
    columns.i32.push(i % 7 === 3 ? null : i === 0 ? 2147483647 : i === 2 ? -2147483648 : ((i * 7919) % 2000) - 1000);
    columns.i64.push(i % 6 === 4 ? null : i === 1 ? 9223372036854775807n : i === 5 ? -9223372036854775808n
      : BigInt(i) * 1234567890123n - 5000000000000n);
    columns.i64req.push(BigInt(i * i) - 100n);
    columns.f32.push(i % 8 === 5 ? null : Math.fround(i * 0.1 - 1.3));
    columns.f64.push(i % 9 === 7 ? null : i === 3 ? Infinity : i === 6 ? -Infinity : i === 9 ? NaN
      : i === 10 ? 1e300 : i * 1.1e-3 - 7.25);
    columns.str.push(i % 4 === 2 ? null : ['', 'alpha', 'héllo wörld', `cat_${i % 3}`, 'x'.repeat(i * 3)][i % 5]);
    columns.b.push(i % 5 === 4 ? null : i % 3 === 0);
    columns.li64.push(i % 7 === 3 ? null : i % 7 === 4 ? []
      : Array.from({ length: (i % 4) + 1 }, (_, k) => (k === 1 && i % 2 ? null : BigInt(i * 10 + k))));
    columns.lstr.push(i % 6 === 2 ? null : i % 6 === 3 ? []
      : Array.from({ length: (i % 3) + 1 }, (_, k) => (k === 2 ? null : `s${i % 4}_${k}`)));
    columns.llist.push(i % 8 === 1 ? null : i % 8 === 2 ? [] : i % 8 === 3 ? [[]] : i % 8 === 4 ? [null]
      : [[BigInt(i)], [BigInt(i + 1), null, BigInt(-i - 2)]]);
    columns.mstrf64.push(i % 5 === 2 ? null : i % 5 === 3 ? new Map()
      : new Map([[`k${i}`, i * 0.5], ['z', i % 2 ? null : -i]]));
    columns.mi64str.push(i % 4 === 1 ? null : i % 4 === 2 ? new Map()
      : new Map([[BigInt(i), `v${i}`], [BigInt(i + 100), null]]));
  }
  return columns;
}

export function canonicalColumns(columns, kinds = KINDS) {
  return Object.fromEntries(
    Object.entries(columns).map(([name, values]) => [name, values.map(v => canonical(kinds[name], v))]));
}

export function toJson(value) {
  return JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? v.toString() : v));
}
