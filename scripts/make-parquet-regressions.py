#!/usr/bin/env python3
"""Writes the regression inputs of issue 19's Parquet panics into
fuzz/regressions/chromdata_member/ (tests/fuzz_replay.rs replays them in every cargo test).

Each input is a chromdata_member fuzz input (byte 0: base store, byte 1: member, rest: the
member's new content, see fuzz/src/lib.rs) made from a committed seed of
fuzz/corpus/chromdata_member/: a valid store with one Parquet member mutated
deterministically (a page header field, or the first byte of a page's values):

* page-type-8-{bins,spots}: the first data page's type is 8 (the format has 0..3). parquet
  56.2.1 panicked ("not implemented: Page type PageType(8) is not supported",
  serialized_reader.rs); 60.1 rejects the value while decoding the page header.
* levels-bit-packed-{cells,spots}: the first data page of a nullable column declares its
  definition levels BIT_PACKED and 1,000,000 values, far more level bytes than the page holds:
  parquet 60.1 still slices the page to that length unchecked in parse_v1_level ("range end
  out of bounds", bytes), at open (cells, a small table read whole) and in queries (spots).
  The member is first rewritten by pyarrow with the same values and row groups, uncompressed
  and with page checksums (not verified by our parquet build): the longer varint of the new
  value count is paid for by a shorter checksum varint, so the page header keeps its length
  and every offset in the footer stays right.
* index-width-{40,255,33}-*: the index bit width of a dictionary-encoded data page (its first
  byte after the levels) above 32: bit-packed reads wider than their buffer, the family of
  56.2.1's "assertion failed: size <= src.len()" (bit_util::read_num_bytes); 60.1 checks the
  width, and its read_num_bytes calls on the Arrow path are bounds-checked.
* values-count-spots: a data page declares 3 values more than it holds (60.1: too few levels).

And, for the obs shards of a dataset (fuzz/regressions/dataset_obs_shard/, from the seed
fuzz/corpus/dataset_obs_shard/base; the target's input is the shard itself):

* footer-with-billions-of-booleans: the footer ends with two unknown fields (id 100), each a
  list announcing 2^31 - 1 booleans and holding none; `created_by` is shortened by their
  bytes, so the file keeps the size the manifest gives. parquet 60.1 skips unknown fields
  with booleans taken as 0 bytes (`skip_till_depth`): 2^31 iterations per field, without a
  read, before it fails (the fuzzer's find was a 2,275-byte shard taking minutes to open).

    python3 scripts/make-parquet-regressions.py          # (re)writes the inputs
    python3 scripts/make-parquet-regressions.py --list   # what each input mutates

Needs pyarrow (as tests/chromdata/make_stores.py does).
"""
import io
import os
import sys

import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "fuzz", "corpus", "chromdata_member")
OUT = os.path.join(ROOT, "fuzz", "regressions", "chromdata_member")

# ---------------------------------------------------------------------------------------
# Thrift compact protocol: just enough to find fields and rewrite integers
# ---------------------------------------------------------------------------------------


def varint(buf, pos):
    v, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def enc_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(v):
    return (v << 1) ^ (v >> 63)


def unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def skip(buf, pos, t):
    """Skips a value of compact type t; returns the position after it."""
    if t in (1, 2):
        return pos
    if t == 3:
        return pos + 1
    if t in (4, 5, 6):
        return varint(buf, pos)[1]
    if t == 7:
        return pos + 8
    if t == 8:
        n, pos = varint(buf, pos)
        return pos + n
    if t in (9, 10):
        h = buf[pos]
        pos += 1
        n, et = h >> 4, h & 0x0F
        if n == 15:
            n, pos = varint(buf, pos)
        for _ in range(n):
            pos = pos + 1 if et in (1, 2) else skip(buf, pos, et)
        return pos
    if t == 11:
        n, pos = varint(buf, pos)
        if n:
            kv = buf[pos]
            pos += 1
            for _ in range(n):
                pos = skip(buf, pos, kv >> 4)
                pos = skip(buf, pos, kv & 0x0F)
        return pos
    if t == 12:
        return struct(buf, pos)[1]
    raise ValueError(f"compact type {t}")


def struct(buf, pos):
    """Parses a struct: ({field id: (type, value start, value end, nested or None)}, end)."""
    fields, last = {}, 0
    while True:
        h = buf[pos]
        pos += 1
        if h == 0:
            return fields, pos
        t, delta = h & 0x0F, h >> 4
        if delta:
            fid = last + delta
        else:
            z, pos = varint(buf, pos)
            fid = unzigzag(z)
        last = fid
        start = pos
        nested = None
        if t == 12:
            nested, pos = struct(buf, pos)
        else:
            pos = skip(buf, pos, t)
        fields[fid] = (t, start, pos, nested)


def int_field(buf, f):
    return unzigzag(varint(buf, f[1])[0])


# PageHeader: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 4 crc,
# 5 data_page_header, 7 dictionary_page_header. DataPageHeader: 1 num_values, 2 encoding,
# 3 definition_level_encoding, 4 repetition_level_encoding. DictionaryPageHeader:
# 1 num_values, 2 encoding.
DATA_PAGE, DICTIONARY_PAGE = 0, 2
BIT_PACKED = 4


def pages(data, meta, column):
    """(header start, {fields}) of every page of `column` in every row group."""
    out = []
    for g in range(meta.num_row_groups):
        c = meta.row_group(g).column(column)
        pos = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
        end = pos + c.total_compressed_size
        while pos < end:
            fields, body = struct(data, pos)
            out.append((g, pos, fields))
            pos = body + int_field(data, fields[3])
    return out


def first_page(data, meta, column, page_type):
    for g, pos, fields in pages(data, meta, column):
        if int_field(data, fields[1]) == page_type:
            return pos, fields
    raise ValueError(f"no page of type {page_type} in column {column}")


def replace_int(data, f, value):
    """data with the integer of field f replaced (same varint length required)."""
    new = enc_varint(zigzag(value))
    assert len(new) == f[2] - f[1], "the new value needs another varint length"
    return data[: f[1]] + new + data[f[2]:]


# ---------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------


def column_index(meta, name):
    for i in range(meta.num_columns):
        if meta.schema.column(i).name == name:
            return i
    raise KeyError(name)


def page_type_8(data, col):
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    pos, fields = first_page(data, meta, column_index(meta, col), DATA_PAGE)
    return replace_int(data, fields[1], 8)


def more_values(data, col, page_type, extra):
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    pos, fields = first_page(data, meta, column_index(meta, col), page_type)
    sub = fields[5 if page_type == DATA_PAGE else 7][3]
    return replace_int(data, sub[1], int_field(data, sub[1]) + extra)


def rewritten(data, dictionary):
    """The same table and row groups, uncompressed, version 1 data pages: dictionary-encoded,
    or plain with page checksums."""
    f = pq.ParquetFile(io.BytesIO(data))
    sink = io.BytesIO()
    with pq.ParquetWriter(
        sink,
        f.schema_arrow,
        compression="NONE",
        use_dictionary=dictionary,
        write_statistics=False,
        write_page_checksum=not dictionary,
        data_page_version="1.0",
    ) as w:
        for g in range(f.num_row_groups):
            w.write_table(f.read_row_group(g))
    return sink.getvalue()


def levels_bit_packed(data, col, count=1_000_000):
    data = rewritten(data, dictionary=False)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    i = column_index(meta, col)
    assert meta.schema.column(i).max_definition_level == 1, f"{col}: not a nullable column"
    pos, fields = first_page(data, meta, i, DATA_PAGE)
    dph = fields[5][3]
    crc, num = fields[4], dph[1]
    new_num = enc_varint(zigzag(count))
    grow = len(new_num) - (num[2] - num[1])
    old_crc = crc[2] - crc[1]
    # A checksum whose varint is `grow` bytes shorter keeps the header's length.
    new_crc = enc_varint(zigzag((1 << (7 * (old_crc - grow) - 2)) - 1))
    assert len(new_crc) == old_crc - grow
    enc = dph[3]
    new_enc = enc_varint(zigzag(BIT_PACKED))
    assert len(new_enc) == enc[2] - enc[1]
    # crc (field 4) comes before the data page header (field 5): splice from the back.
    assert crc[2] <= num[1] < enc[1]
    out = data[: enc[1]] + new_enc + data[enc[2]:]
    out = out[: num[1]] + new_num + out[num[2]:]
    return out[: crc[1]] + new_crc + out[crc[2]:]


def index_bit_width(data, col, width):
    """The first dictionary-encoded data page's index bit width (its first byte after the
    levels) set to `width`."""
    data = rewritten(data, dictionary=True)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    i = column_index(meta, col)
    pos, fields = first_page(data, meta, i, DATA_PAGE)
    body = struct(data, pos)[1]
    if meta.schema.column(i).max_definition_level > 0:
        body += 4 + int.from_bytes(data[body : body + 4], "little")
    return data[:body] + bytes([width]) + data[body + 1 :]


# (input name, seed file, mutation, its arguments)
CASES = [
    ("parquet-page-type-8-bins", "2-tables_bins.parquet", page_type_8, ("start",)),
    ("parquet-page-type-8-spots", "0-tables_spots.parquet", page_type_8, ("x",)),
    ("parquet-levels-bit-packed-cells", "2-tables_cells.parquet", levels_bit_packed, ("area",)),
    ("parquet-levels-bit-packed-spots", "0-tables_spots.parquet", levels_bit_packed, ("x",)),
    ("parquet-index-width-40-bins", "2-tables_bins.parquet", index_bit_width, ("name", 40)),
    ("parquet-index-width-255-spots", "0-tables_spots.parquet", index_bit_width, ("x", 255)),
    ("parquet-index-width-33-traces", "2-tables_traces.parquet", index_bit_width, ("length", 33)),
    ("parquet-values-count-spots", "0-tables_spots.parquet", more_values, ("readout", DATA_PAGE, 3)),
]


def billions_of_booleans(data, fields=2):
    n = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - n:-8]
    top, end = struct(footer, 0)
    assert end == len(footer)
    _, s, e, _ = top[6]  # created_by
    length, p = varint(footer, s)
    unknown = bytes([0x09]) + enc_varint(zigzag(100)) + bytes([0xF1]) + enc_varint(2**31 - 1)
    cut = len(unknown) * fields
    assert length >= cut and len(enc_varint(length - cut)) == p - s
    new = (footer[:s] + enc_varint(length - cut) + footer[p:p + length - cut] + footer[e:end - 1]
           + unknown * fields + b"\x00")
    assert len(new) == len(footer)
    return data[:-8 - n] + new + data[-8:]


DATASET_CASES = [
    ("dataset_obs_shard", "footer-with-billions-of-booleans", "base", billions_of_booleans),
]


def main():
    if "--list" in sys.argv:
        for name, seed, fn, args in CASES:
            print(f"{name}: {seed[2:]} of base store {seed[0]}, {fn.__name__}{args}")
        for target, name, seed, fn in DATASET_CASES:
            print(f"{target}/{name}: {fn.__name__} of the seed {seed}")
        return
    os.makedirs(OUT, exist_ok=True)
    for name, seed, fn, args in CASES:
        raw = open(os.path.join(SEEDS, seed), "rb").read()
        prefix, member = raw[:2], raw[2:]
        mutated = fn(member, *args)
        assert mutated != member
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(prefix + mutated)
        print(f"{name}: {len(prefix) + len(mutated)} bytes")
    for target, name, seed, fn in DATASET_CASES:
        raw = open(os.path.join(ROOT, "fuzz", "corpus", target, seed), "rb").read()
        mutated = fn(raw)
        assert mutated != raw and len(mutated) == len(raw)
        out = os.path.join(ROOT, "fuzz", "regressions", target)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, name), "wb") as f:
            f.write(mutated)
        print(f"{target}/{name}: {len(mutated)} bytes")


if __name__ == "__main__":
    main()
