// Shared by the interop scripts: the test dataset (canonical.mjs) as an apache-arrow Table.
import * as arrow from 'apache-arrow';

import { KINDS } from './canonical.mjs';

function arrowField(name, kind, nullable = true) {
  const item = k => {
    if (k === 'int') return new arrow.Int64();
    if (k === 'float') return new arrow.Float64();
    if (k === 'string') return new arrow.Utf8();
    if (k.startsWith('list<')) return new arrow.List(new arrow.Field('item', item(k.slice(5, -1)), true));
    throw new Error(k);
  };
  let type;
  if (name === 'i32') type = new arrow.Int32();
  else if (name === 'f32') type = new arrow.Float32();
  else if (kind === 'bool') type = new arrow.Bool();
  else if (kind.startsWith('map<')) {
    const [k, v] = kind.slice(4, -1).split(',');
    type = new arrow.Map_(new arrow.Field('entries', new arrow.Struct([
      new arrow.Field('key', item(k), false), new arrow.Field('value', item(v), true)]), false));
  } else type = item(kind);
  return new arrow.Field(name, type, nullable);
}

export function arrowTable(columns, rows) {
  const fields = Object.keys(KINDS).map(name => arrowField(name, KINDS[name], name !== 'i64req'));
  const vectors = fields.map(f => arrow.vectorFromArray(columns[f.name], f.type));
  const schema = new arrow.Schema(fields);
  const data = arrow.makeData({
    type: new arrow.Struct(fields), length: rows, nullCount: 0, children: vectors.map(v => v.data[0]),
  });
  return new arrow.Table([new arrow.RecordBatch(schema, data)]);
}

