#!/usr/bin/env python3
"""Independent reader of TensorBoard event files for the tests: TFRecord framing with masked
CRC-32C (bitwise, not table-driven like tzrec's writer) and TensorFlow's Event / Summary
protobuf fields decoded by hand. Prints one JSON object per event:
{"wall_time", "step", "file_version"}, {"wall_time", "step", "tag", "value"} or, for
histograms, {"wall_time", "step", "tag", "histo": {min, max, num, sum, sum_squares,
bucket_limit, bucket}}.
Exits non-zero naming the record when a length or CRC does not check."""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 2:
            size, i = varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError("wire type %d" % wire)
        yield field, wire, value


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def histogram(buf):
    """TensorFlow's HistogramProto: min, max, num, sum, sum_squares, bucket_limit, bucket."""
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    out = {"bucket_limit": [], "bucket": []}
    for field, wire, value in fields(buf):
        if field in names and wire == 1:
            out[names[field]] = struct.unpack("<d", value)[0]
        elif field in (6, 7) and wire == 2:
            key = "bucket_limit" if field == 6 else "bucket"
            out[key] += list(struct.unpack("<%dd" % (len(value) // 8), value))
    return out


def main(path):
    data = open(path, "rb").read()
    pos = record = 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(header) != length_crc:
            sys.exit("%s: record %d: bad length CRC" % (path, record))
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if len(body) != length or masked(body) != body_crc:
            sys.exit("%s: record %d: bad data CRC" % (path, record))
        pos += 16 + length
        record += 1
        event = {}
        for field, wire, value in fields(body):
            if field == 1 and wire == 1:
                event["wall_time"] = struct.unpack("<d", value)[0]
            elif field == 2 and wire == 0:
                event["step"] = value
            elif field == 3 and wire == 2:
                event["file_version"] = value.decode()
            elif field == 5 and wire == 2:
                for f, w, v in fields(value):  # Summary.value
                    if f != 1 or w != 2:
                        continue
                    for vf, vw, vv in fields(v):
                        if vf == 1 and vw == 2:
                            event["tag"] = vv.decode()
                        elif vf == 2 and vw == 5:
                            event["value"] = struct.unpack("<f", vv)[0]
                        elif vf == 5 and vw == 2:
                            event["histo"] = histogram(vv)
        print(json.dumps(event))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
