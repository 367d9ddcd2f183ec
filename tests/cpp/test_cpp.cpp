// Tests of bindings/cpp/deltacells.hpp: results equal independent expectations, failures
// throw deltacells::error with the right status, handles and streams are move-only RAII and
// release what they own (run under valgrind by ctest: a leaked stream or batch fails).
//
// Usage: test_cpp [CHROMDATA_STORES_DIR]   (the output of tests/chromdata/make_stores.py,
//                                          with expected_csv.py's CSV files in DIR/csv)
#include "deltacells.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace dc = deltacells;

static int failures = 0;
#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)

// Runs f, which must throw deltacells::error with `status` and a non-empty message.
static void expect_error(dc_status status, const std::function<void()> &f, int line) {
  try {
    f();
    std::fprintf(stderr, "line %d: no exception, expected %s\n", line, dc_status_name(status));
    failures++;
  } catch (const dc::error &e) {
    if (e.status() != status || e.message().empty() ||
        std::string(e.what()).find(dc_status_name(status)) == std::string::npos) {
      std::fprintf(stderr, "line %d: got %s (%s), expected %s\n", line, e.status_name(), e.what(),
                   dc_status_name(status));
      failures++;
    }
  }
}
#define EXPECT_ERROR(status, body) expect_error(status, [&]() { body; }, __LINE__)

// ---------------------------------------------------------------------------------------
// A tiny Arrow producer: a struct batch {n: int32, label: utf8} with counted releases.
// ---------------------------------------------------------------------------------------
static int arrays_released = 0;

struct ColumnData {
  std::vector<int32_t> ints;
  std::vector<int32_t> offsets;
  std::string chars;
  std::vector<const void *> buffers;
};

static void release_array(struct ArrowArray *a) {
  for (int64_t i = 0; i < a->n_children; i++) {
    if (a->children[i]->release) a->children[i]->release(a->children[i]);
    delete a->children[i];
  }
  delete[] a->children;
  delete static_cast<ColumnData *>(a->private_data);
  a->release = nullptr;
  if (a->n_children > 0) arrays_released++; // count batches, not their columns
}

static void fill_array(struct ArrowArray *a, int64_t length, ColumnData *d, int64_t n_buffers,
                       int64_t n_children) {
  a->length = length;
  a->null_count = 0;
  a->offset = 0;
  a->n_buffers = n_buffers;
  a->buffers = d->buffers.data();
  a->n_children = n_children;
  a->children = n_children ? new struct ArrowArray *[n_children] : nullptr;
  a->dictionary = nullptr;
  a->release = release_array;
  a->private_data = d;
}

static void make_batch(const std::vector<int32_t> &ints, const std::vector<std::string> &labels,
                       dc::ArrowArrayOwner &out) {
  auto *top = new ColumnData;
  top->buffers = {nullptr};
  fill_array(out.get(), static_cast<int64_t>(ints.size()), top, 1, 2);

  auto *n = new ColumnData;
  n->ints = ints;
  n->buffers = {nullptr, n->ints.data()};
  out.get()->children[0] = new struct ArrowArray;
  fill_array(out.get()->children[0], static_cast<int64_t>(ints.size()), n, 2, 0);

  auto *s = new ColumnData;
  s->offsets.push_back(0);
  for (const auto &l : labels) {
    s->chars += l;
    s->offsets.push_back(static_cast<int32_t>(s->chars.size()));
  }
  s->buffers = {nullptr, s->offsets.data(), s->chars.data()};
  out.get()->children[1] = new struct ArrowArray;
  fill_array(out.get()->children[1], static_cast<int64_t>(labels.size()), s, 3, 0);
}

// A static schema {n: int32, label: utf8} (borrowed by the library, never released by it).
static struct ArrowSchema schema_n, schema_label, schema_top;
static struct ArrowSchema *schema_children[2] = {&schema_n, &schema_label};
static void init_schema() {
  schema_n = {"i", "n", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  schema_label = {"u", "label", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  schema_top = {"+s", "", nullptr, 0, 2, schema_children, nullptr, nullptr, nullptr};
}

// A general one: columns of int64 ("l"), float64 ("g") or utf8 ("u"), with a heap schema.
struct Col {
  std::string name, format;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<std::string> strs;
  size_t size() const { return format == "u" ? strs.size() : format == "l" ? ints.size() : reals.size(); }
};

struct TableData {
  std::vector<Col> cols;
  std::vector<std::vector<int32_t>> offsets;
  std::vector<std::string> chars;
  std::vector<std::vector<const void *>> buffers;
  std::vector<struct ArrowArray> children;
  std::vector<struct ArrowArray *> child_ptrs;
  const void *top_buffers[1] = {nullptr};
};

static void release_table(struct ArrowArray *a) {
  delete static_cast<TableData *>(a->private_data);
  a->release = nullptr;
  arrays_released++;
}
static void release_child(struct ArrowArray *a) { a->release = nullptr; } // owned by the table

static void release_schema(struct ArrowSchema *s) {
  for (int64_t i = 0; i < s->n_children; i++) {
    delete[] s->children[i]->name;
    delete s->children[i];
  }
  delete[] s->children;
  s->release = nullptr;
}

static void make_table(std::vector<Col> cols, dc::ArrowArrayOwner &arr, dc::ArrowSchemaOwner &sch) {
  auto *d = new TableData;
  d->cols = std::move(cols);
  size_t n = d->cols.size(), rows = n ? d->cols[0].size() : 0;
  d->offsets.resize(n);
  d->chars.resize(n);
  d->buffers.resize(n);
  d->children.resize(n);
  d->child_ptrs.resize(n);
  struct ArrowSchema *s = sch.get();
  *s = {"+s", "", nullptr, 0, static_cast<int64_t>(n), new struct ArrowSchema *[n], nullptr, release_schema, nullptr};
  for (size_t c = 0; c < n; c++) {
    Col &col = d->cols[c];
    struct ArrowArray &a = d->children[c];
    if (col.format == "u") {
      d->offsets[c].push_back(0);
      for (const auto &x : col.strs) {
        d->chars[c] += x;
        d->offsets[c].push_back(static_cast<int32_t>(d->chars[c].size()));
      }
      d->buffers[c] = {nullptr, d->offsets[c].data(), d->chars[c].data()};
    } else {
      d->buffers[c] = {nullptr, col.format == "l" ? static_cast<const void *>(col.ints.data())
                                                   : static_cast<const void *>(col.reals.data())};
    }
    a = {static_cast<int64_t>(rows), 0, 0, static_cast<int64_t>(d->buffers[c].size()), 0,
         d->buffers[c].data(), nullptr, nullptr, release_child, nullptr};
    d->child_ptrs[c] = &a;
    char *name = new char[col.name.size() + 1];
    std::memcpy(name, col.name.c_str(), col.name.size() + 1);
    s->children[c] = new ArrowSchema{col.format == "u" ? "u" : col.format == "l" ? "l" : "g", name,
                                            nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  }
  *arr.get() = {static_cast<int64_t>(rows), 0, 0, 1, static_cast<int64_t>(n), d->top_buffers,
                d->child_ptrs.data(), nullptr, release_table, d};
}

// A fake stream whose release is counted, to test ArrowStream's ownership on its own.
static int fake_streams_released = 0;
static void fake_release(struct ArrowArrayStream *s) {
  s->release = nullptr;
  fake_streams_released++;
}
static struct ArrowArrayStream fake_stream() {
  struct ArrowArrayStream s;
  std::memset(&s, 0, sizeof s);
  s.release = fake_release;
  return s;
}

// Rows and nonzeros of a stream, consumed batch by batch.
static std::pair<int64_t, int64_t> count_rows(dc::ArrowStream &s) {
  dc::ArrowSchemaOwner schema = s.schema();
  int64_t rows = 0, batches = 0;
  dc::ArrowArrayOwner batch;
  while (s.next(batch)) {
    rows += batch->length;
    batches++;
  }
  CHECK(std::string(schema->format) == "+s");
  return {rows, batches};
}

// ---------------------------------------------------------------------------------------
static void test_versions() {
  CHECK(dc::abi_compatible());
  CHECK(dc::abi_version() == DC_ABI_VERSION);
  CHECK(dc::version() == std::to_string(DC_VERSION_MAJOR) + "." + std::to_string(DC_VERSION_MINOR) +
                             "." + std::to_string(DC_VERSION_PATCH));
  CHECK(std::string(dc::status_name(DC_ERR_FORMAT)) == "DC_ERR_FORMAT");
}

static void test_tiles() {
  // 3 cells x 70000 genes; a count above 65535 and a wide gap (exceptions).
  dc::Csr m{{0, 2, 2, 5}, {1, 69999, 0, 7, 8}, {3, 1, 100000, 2, 1}};
  std::vector<uint8_t> blob = dc::tile_encode(m, 70000);
  dc_tile_info info = dc::tile_inspect(blob);
  CHECK(info.n_cells == 3 && info.nnz == 5 && info.n_genes == 70000 && info.version == 2);
  dc::Csr back = dc::tile_decode(blob);
  CHECK(back.indptr == m.indptr && back.indices == m.indices && back.values == m.values);
  dc::CsrF32 f = dc::tile_decode<float>(blob, 1);
  CHECK(f.values.size() == 5 && f.values[2] == 100000.0f);

  std::vector<uint8_t> cut(blob.begin(), blob.end() - 1);
  EXPECT_ERROR(DC_ERR_FORMAT, dc::tile_inspect(cut));
  EXPECT_ERROR(DC_ERR_FORMAT, dc::tile_decode(cut));
  dc::Csr bad{{0, 2}, {5, 5}, {1, 1}}; // repeated gene
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, dc::tile_encode(bad, 10));
}

static void test_dataset(const std::string &dir) {
  const std::string path = dir + "/ds";
  const uint32_t n_genes = 5;
  // 7 cells in input column space; cell 3 empty.
  dc::Csr rows{{0, 2, 3, 5, 5, 7, 8, 10},
               {0, 4, 2, 1, 3, 0, 2, 4, 1, 3},
               {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
  const std::vector<int32_t> order{4, 3, 2, 1, 0}; // output column j = input column order[j]
  const std::vector<std::string> names{"g0", "g1", "g2", "g3", "g4"};
  const int before = arrays_released;
  {
    dc::Writer w(path, n_genes);
    w.set(DC_WRITER_TILE_SIZE, 3);
    w.set(DC_WRITER_N_CHUNKS, 2);
    w.set_gene_order(order);
    w.set_var_names(names);
    w.append_csr(rows);
    init_schema();
    dc::ArrowArrayOwner b1, b2;
    make_batch({0, 1, 2, 3}, {"a", "b", "a", "c"}, b1);
    make_batch({4, 5, 6}, {"b", "b", "a"}, b2);
    w.append_obs(b1.get(), &schema_top);
    w.append_obs(b2.get(), &schema_top);
    CHECK(!b1.valid() && !b2.valid()); // moved into the library (released by it, below)
    EXPECT_ERROR(DC_ERR_STATE, w.set(DC_WRITER_TILE_SIZE, 10)); // too late
    w.finish();
    EXPECT_ERROR(DC_ERR_STATE, w.finish());
    // A writer abandoned without finish leaves nothing behind.
    dc::Writer abandoned(dir + "/abandoned", 3);
    abandoned.append_csr(1, std::vector<int64_t>{0, 1}.data(), std::vector<int32_t>{0}.data(),
                         std::vector<int32_t>{1}.data());
  }
  CHECK(arrays_released == before + 2); // the library released both batches
  EXPECT_ERROR(DC_ERR_NOT_FOUND, dc::Dataset(dir + "/abandoned"));
  EXPECT_ERROR(DC_ERR_EXISTS, { dc::Writer w(path, n_genes); w.append_csr(rows); });

  dc::Dataset ds(path);
  dc_dataset_info info = ds.info();
  CHECK(info.n_cells == 7 && info.n_genes == 5 && info.n_tiles == 3 && info.nnz == 10);
  CHECK(info.has_gene_order && info.has_var_names && info.has_obs && !info.has_var_table);
  CHECK(ds.gene_order() == order);
  CHECK((ds.var_names() == std::vector<std::string>{"g4", "g3", "g2", "g1", "g0"}));
  ds.set(DC_DATASET_THREADS, 2);
  ds.set(DC_DATASET_TILE_CACHE, 1);
  ds.set_cache_dir(dir + "/cache");
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, ds.set(DC_DATASET_VERIFY_CRC, 7));
  CHECK((dc::Dataset::param_bounds(DC_DATASET_VERIFY_CRC) == std::pair<int64_t, int64_t>{0, 1}));
  CHECK((dc::Writer::param_bounds(DC_WRITER_N_CHUNKS) == std::pair<int64_t, int64_t>{1, 65536}));
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, dc::Writer::param_bounds(99));

  // Expected rows in output space, computed here from the input.
  std::vector<std::map<int32_t, int32_t>> expect(7);
  for (size_t r = 0; r < 7; r++)
    for (int64_t k = rows.indptr[r]; k < rows.indptr[r + 1]; k++)
      for (int32_t j = 0; j < 5; j++)
        if (order[j] == rows.indices[k]) expect[r][j] = rows.values[k];

  const std::vector<uint64_t> cells{6, 0, 3, 6, 4};
  dc::Csr g = ds.gather(cells);
  CHECK(g.n_rows() == cells.size() && ds.batch_nnz(cells) == g.nnz());
  for (size_t i = 0; i < cells.size(); i++) {
    std::map<int32_t, int32_t> got;
    for (int64_t k = g.indptr[i]; k < g.indptr[i + 1]; k++) got[g.indices[k]] = g.values[k];
    CHECK(got == expect[cells[i]]);
  }
  dc::CsrF32 gf = ds.gather<float>(std::vector<uint64_t>{1, 2});
  CHECK(gf.nnz() == 3);
  CHECK(ds.gather(std::vector<uint64_t>{3}).nnz() == 0);
  dc::TileBounds b = ds.tile_bounds(2);
  CHECK(b.first_cell == 6 && b.n_cells == 1 && b.nnz == 2);
  dc::Csr t = ds.read_tile(2);
  CHECK(t.indptr == (std::vector<int64_t>{0, 2}) && t.nnz() == 2);
  EXPECT_ERROR(DC_ERR_OUT_OF_RANGE, ds.gather(std::vector<uint64_t>{7}));
  EXPECT_ERROR(DC_ERR_OUT_OF_RANGE, ds.tile_bounds(3));
  EXPECT_ERROR(DC_ERR_OUT_OF_RANGE, ds.var_name(5));
  EXPECT_ERROR(DC_ERR_NOT_FOUND, ds.var_table());
  EXPECT_ERROR(DC_ERR_NOT_FOUND, ds.obs({"no_such_column"}));

  // Batches: range-for over a shuffled epoch gives every cell once, as gathers do.
  ds.set(DC_DATASET_CACHE_BYTES, 1 << 20);
  std::vector<uint64_t> epoch = ds.shuffled_order(42, 2);
  CHECK(epoch == ds.shuffled_order(42, 2) && epoch.size() == 7);
  {
    dc::Batches<int32_t> batches = ds.batches(epoch, 3);
    size_t row = 0, n_batches = 0;
    for (const dc::Csr &batch : batches) {
      CHECK(batch.n_rows() == (n_batches < 2 ? 3u : 1u));
      for (size_t i = 0; i < batch.n_rows(); i++, row++) {
        std::map<int32_t, int32_t> got;
        for (int64_t k = batch.indptr[i]; k < batch.indptr[i + 1]; k++) got[batch.indices[k]] = batch.values[k];
        CHECK(got == expect[epoch[row]]);
      }
      n_batches++;
    }
    CHECK(row == 7 && n_batches == 3);
    CHECK(batches.peek().first == 0);
  }
  {
    dc::Batches<float> fb(ds, cells, 2, 1);
    dc::CsrF32 first;
    CHECK(fb.next(first) && first.n_rows() == 2);
  } // freed in the middle
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, ds.batches(cells, 0));
  EXPECT_ERROR(DC_ERR_OUT_OF_RANGE, ds.batches(std::vector<uint64_t>{1, 7}, 1));

  // obs: one batch per tile, all rows; the stream outlives the handle.
  dc::ArrowStream obs = ds.obs();
  dc::ArrowStream label = ds.obs({"label"});
  {
    dc::Dataset moved = std::move(ds); // the moved-to handle owns it now ...
    CHECK(!ds && moved);
    dc::Dataset other(path);
    other = std::move(moved);          // ... and move assignment frees the previous one
    CHECK(!moved && other && other.n_cells() == 7);
  } // freed here, streams still valid
  auto [n_rows, n_batches] = count_rows(obs);
  CHECK(n_rows == 7 && n_batches == 3);
  dc::ArrowSchemaOwner ls = label.schema();
  CHECK(ls->n_children == 1 && std::string(ls->children[0]->name) == "label");
  CHECK(count_rows(label).first == 7);

  EXPECT_ERROR(DC_ERR_NOT_FOUND, dc::Dataset(dir + "/missing"));
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, dc::Writer(path + "2", 0));
}

static void test_stream_ownership() {
  static_assert(!std::is_copy_constructible_v<dc::ArrowStream>);
  static_assert(!std::is_copy_constructible_v<dc::Dataset>);
  static_assert(!std::is_copy_assignable_v<dc::Writer>);
  static_assert(!std::is_copy_constructible_v<dc::ChromData>);
  static_assert(!std::is_copy_constructible_v<dc::ChromDataWriter>);
  static_assert(std::is_nothrow_move_constructible_v<dc::Dataset>);
  static_assert(std::is_nothrow_move_assignable_v<dc::ArrowStream>);
  fake_streams_released = 0;
  {
    struct ArrowArrayStream raw = fake_stream();
    dc::ArrowStream a(&raw);
    CHECK(raw.release == nullptr && a.valid()); // ownership taken
    dc::ArrowStream b = std::move(a);
    CHECK(!a.valid() && b.valid() && fake_streams_released == 0);
    struct ArrowArrayStream raw2 = fake_stream();
    dc::ArrowStream c(&raw2);
    c = std::move(b); // releases raw2's stream
    CHECK(fake_streams_released == 1);
    bool threw = false;
    try { (void)a.schema(); } catch (const std::logic_error &) { threw = true; }
    CHECK(threw);
  } // releases the first
  CHECK(fake_streams_released == 2);
  struct ArrowArrayStream raw3 = fake_stream();
  dc::ArrowStream d(&raw3);
  struct ArrowArrayStream out = d.release();
  CHECK(!d.valid() && out.release != nullptr);
  out.release(&out);
  CHECK(fake_streams_released == 3);
}

static void test_typed_query(dc::ChromData &cd); // below, with the other typed tests

static void test_chromdata_writer(const std::string &dir) {
  // 7 spots, given out of order: traces t1 (3 spots, two chromosomes) and t2 (4 spots).
  std::vector<Col> cols{
      {"chrom", "u", {}, {}, {"chr2", "chr1", "chr1", "chr1", "chr2", "chr1", "chr1"}},
      {"start", "l", {500, 100, 300, 100, 900, 200, 700}, {}, {}},
      {"end", "l", {600, 200, 400, 200, 1000, 300, 800}, {}, {}},
      {"trace_id", "u", {}, {}, {"t1", "t2", "t2", "t1", "t2", "t1", "t2"}},
      {"x", "g", {}, {1, 2, 3, 4, 5, 6, 7}, {}},
      {"y", "g", {}, {1, 2, 3, 4, 5, 6, 7}, {}},
      {"z", "g", {}, {1, 2, 3, 4, 5, 6, 7}, {}},
  };
  const std::string path = dir + "/spots.cdz";
  const int before = arrays_released;
  {
    dc::ChromDataWriter w(path);
    w.set(DC_CDW_LAYOUT, DC_LAYOUT_PARTITIONED);
    w.set(DC_CDW_THREADS, 1);
    EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, w.set(DC_CDW_LAYOUT, 7));
    CHECK((dc::ChromDataWriter::param_bounds(DC_CDW_LAYOUT) ==
           std::pair<int64_t, int64_t>{DC_LAYOUT_FLAT, DC_LAYOUT_PRIMARY_COORDS}));
    EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, dc::ChromDataWriter::param_bounds(99));
    dc::ArrowArrayOwner batch;
    dc::ArrowSchemaOwner schema;
    make_table(cols, batch, schema);
    dc::ArrowArrayOwner cats;
    dc::ArrowSchemaOwner cats_schema;
    make_table({{"category", "u", {}, {}, {"t1", "t2", "unused"}}}, cats, cats_schema);
    w.set_categories("trace_id", cats, cats_schema); // unused category kept
    CHECK(!cats.valid());
    w.append(batch, schema);
    CHECK(!batch.valid() && schema.valid()); // batch moved in, schema borrowed
    // the traces table (a row per category, the unused one too), a binm array (one value
    // per bin: 6 distinct loci) and a results table, each moved in
    dc::ArrowArrayOwner traces, binm, tab;
    dc::ArrowSchemaOwner traces_schema, binm_schema, tab_schema;
    make_table({{"trace_id", "u", {}, {}, {"t1", "t2", "unused"}}, {"label", "l", {10, 20, 30}, {}, {}}},
               traces, traces_schema);
    w.set_table("traces", traces, traces_schema);
    make_table({{"value", "g", {}, {0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, {}}}, binm, binm_schema);
    w.add_array("binm", "k", binm, binm_schema);
    make_table({{"a", "l", {7, 8}, {}, {}}, {"b", "u", {}, {}, {"p", "q"}}}, tab, tab_schema);
    w.add_result({"tab"}, "{\"type\":\"table\"}", tab, tab_schema);
    CHECK(!traces.valid() && !binm.valid() && !tab.valid());
    w.add_result({"m"}, "{\"type\":\"mapping\",\"kind\":\"k\"}");
    w.add_result({"m", "v"}, "{\"type\":\"json\",\"value\":[1,2]}");
    EXPECT_ERROR(DC_ERR_NOT_FOUND, w.add_result({"x", "v"}, "{\"type\":\"json\",\"value\":1}"));
    w.set_json("uns", "", "{\"a\":1}");
    EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, w.set_json("uns2", "", "{}"));
    dc::ArrowArrayOwner bad;
    dc::ArrowSchemaOwner bad_schema;
    make_table({{"chrom", "u", {}, {}, {"chr1"}}}, bad, bad_schema); // no trace_id
    EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, w.append(bad, bad_schema));
    CHECK(!bad.valid()); // released on error too
    dc::ChromDataWriter moved = std::move(w);
    CHECK(!w && moved);
    moved.finish();
    EXPECT_ERROR(DC_ERR_STATE, moved.finish());
    dc::ChromDataWriter abandoned(dir + "/abandoned.cdz");
  }
  CHECK(arrays_released == before + 6);
  EXPECT_ERROR(DC_ERR_NOT_FOUND, dc::ChromData(dir + "/abandoned.cdz"));
  EXPECT_ERROR(DC_ERR_EXISTS, dc::ChromDataWriter(path).finish());
  EXPECT_ERROR(DC_ERR_NOT_FOUND, dc::ChromDataWriter(dir + "/no/such/dir.cdz"));
  // With options (§7): passed through (an unknown key is refused, a library setting is
  // taken at a local path); to a URL whose server is gone, finish() is DC_ERR_IO naming it.
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, dc::ChromDataWriter(dir + "/o.cdz", {"no_such_option=1"}));
  {
    dc::ChromDataWriter local(dir + "/o.cdz", {"max_concurrency=2"});
    dc::ArrowArrayOwner b;
    dc::ArrowSchemaOwner bs;
    make_table(cols, b, bs);
    local.append(b, bs);
    local.finish();
    CHECK(dc::ChromData(dir + "/o.cdz").info().n_spots == 7);
    dc::ChromDataWriter remote("s3://bucket/o.cdz",
                               {"aws_endpoint=http://127.0.0.1:9", "aws_region=us-east-1",
                                "aws_access_key_id=k", "aws_secret_access_key=s",
                                "allow_http=true", "retries=0", "timeout_ms=2000"});
    dc::ArrowArrayOwner b2;
    dc::ArrowSchemaOwner bs2;
    make_table(cols, b2, bs2);
    remote.append(b2, bs2);
    EXPECT_ERROR(DC_ERR_IO, remote.finish());
    CHECK(std::string(dc_last_error()).find("s3://bucket/o.cdz") != std::string::npos);
  }

  dc::ChromData cd(path);
  dc_chromdata_info info = cd.info();
  CHECK(info.n_spots == 7 && info.n_traces == 3 && info.layout == DC_LAYOUT_PARTITIONED);
  test_typed_query(cd);
  dc::ArrowStream t1 = cd.get_trace("t1", {"coords"});
  CHECK(count_rows(t1).first == 3);
  dc::ArrowStream c1 = cd.get_chrom("chr1");
  CHECK(count_rows(c1).first == 5);
  // original order: x is 1..7 as appended
  dc::ArrowStream all = cd.read_spots(true, {"x"});
  dc::ArrowSchemaOwner as = all.schema();
  int64_t xcol = -1;
  for (int64_t c = 0; c < as->n_children; c++)
    if (std::string(as->children[c]->name) == "x") xcol = c;
  CHECK(xcol >= 0 && std::string(as->children[xcol]->format) == "g");
  std::vector<double> xs;
  dc::ArrowArrayOwner b;
  while (xcol >= 0 && all.next(b)) {
    const struct ArrowArray *x = b->children[xcol];
    const auto *v = static_cast<const double *>(x->buffers[1]);
    for (int64_t i = 0; i < x->length; i++) xs.push_back(v[x->offset + i]);
  }
  CHECK((xs == std::vector<double>{1, 2, 3, 4, 5, 6, 7}));
  CHECK(cd.attrs("results", {"m"}) == "{\"type\":\"mapping\",\"kind\":\"k\",\"keys\":[\"v\"]}");
  CHECK(cd.attrs("uns") == "{\"a\":1}");
  EXPECT_ERROR(DC_ERR_NOT_FOUND, cd.attrs("results", {"nope"}));
  // the traces table, the binm array and the results table read back, typed
  dc::Table traces_back(cd.table("traces"));
  std::map<std::string, int64_t> labels;
  for (const dc::Batch &b : traces_back)
    for (int64_t r = 0; r < b.num_rows(); r++)
      labels[std::string(b.column("trace_id").str(r))] = b.column<int64_t>("label")[static_cast<size_t>(r)];
  CHECK((labels == std::map<std::string, int64_t>{{"t1", 10}, {"t2", 20}, {"unused", 30}}));
  dc::Table binm_back(cd.array("binm", {"k"}));
  std::vector<double> binm_values;
  for (const dc::Batch &b : binm_back)
    for (double v : b.column<double>("value")) binm_values.push_back(v);
  CHECK((binm_values == std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}));
  EXPECT_ERROR(DC_ERR_NOT_FOUND, cd.array("binm", {"nope"}));
  dc::Table tab_back(cd.result_table({"tab"}));
  CHECK(tab_back.num_rows() == 2 && (tab_back.column_names() == std::vector<std::string>{"a", "b"}));
  const dc::Batch &tb = tab_back.batch(0);
  CHECK(tb.column<int64_t>("a")[1] == 8 && tb.column("b").str(0) == "p");
  EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, cd.result_table({"m"})); // a mapping, not a table
  // rewrite into 2.2: the given category list and the results come along
  dc::rewrite(path, dir + "/spots22.chromdata.zarr");
  dc::ChromData re(dir + "/spots22.chromdata.zarr");
  CHECK(re.info().layout == DC_LAYOUT_PRIMARY_COORDS && re.info().n_traces == 3);
  CHECK(re.attrs("results", {"m", "v"}) == "{\"type\":\"json\",\"value\":[1,2]}");
  EXPECT_ERROR(DC_ERR_EXISTS, dc::rewrite(path, dir + "/spots22.chromdata.zarr"));
}

static void test_chromdata(const std::string &stores) {
  for (const char *name : {"main_20.chromdata.zarr", "main_21.cdz", "main_22.cdz"}) {
    dc::ChromData cd(stores + "/" + name);
    dc_chromdata_info info = cd.info();
    CHECK(info.format_major == 2 && info.has_cell_id && info.n_spots > 0);
    dc::ArrowStream all = cd.read_spots();
    CHECK(count_rows(all).first == static_cast<int64_t>(info.n_spots));
    dc::ArrowStream orig = cd.read_spots(true, {"coords"});
    CHECK(count_rows(orig).first == static_cast<int64_t>(info.n_spots));
    // 32 spots in trace t0 (tests/chromdata expected/main/main_001.parquet, pandas answer)
    dc::ArrowStream t0 = cd.get_trace("t0");
    CHECK(count_rows(t0).first == 32);
    dc::ArrowStream coords = cd.get_trace("t0", {"coords"});
    dc::ArrowSchemaOwner cs = coords.schema();
    CHECK(cs->n_children == 6); // bin_id, trace_id, cell_id, x, y, z
    int64_t by_cell = 0, by_chrom = 0, traces = 0, cells = 0;
    dc::ArrowStream cats = cd.categories("spots", "cell_id");
    dc::ArrowArrayOwner batch;
    while (cats.next(batch)) {
      // every category: sum of get_cell rows = all spots (unused categories have 0 rows)
      const auto *offsets = static_cast<const int32_t *>(batch->children[0]->buffers[1]);
      const char *chars = static_cast<const char *>(batch->children[0]->buffers[2]);
      for (int64_t i = 0; i < batch->length; i++) {
        std::string id(chars + offsets[i], chars + offsets[i + 1]);
        dc::ArrowStream s = cd.get_cell(id, {"coords"});
        by_cell += count_rows(s).first;
      }
    }
    CHECK(by_cell == static_cast<int64_t>(info.n_spots));
    for (const char *chrom : {"chr1", "chr2", "chr 3/x"}) {
      dc::ArrowStream s = cd.get_chrom(chrom);
      by_chrom += count_rows(s).first;
    }
    CHECK(by_chrom == static_cast<int64_t>(info.n_spots));
    dc::ArrowStream it = cd.iter_traces(3, {"coords"});
    traces = count_rows(it).first;
    dc::ArrowStream ic = cd.iter_cells(2);
    cells = count_rows(ic).first;
    CHECK(traces == static_cast<int64_t>(info.n_spots) && cells == static_cast<int64_t>(info.n_spots));
    dc::ArrowStream bins = cd.table("bins");
    CHECK(count_rows(bins).first == static_cast<int64_t>(info.n_bins));
    dc::ArrowStream keys = cd.keys("layers");
    CHECK(count_rows(keys).first == 2);
    EXPECT_ERROR(DC_ERR_NOT_FOUND, cd.get_trace("no such trace"));
    EXPECT_ERROR(DC_ERR_NOT_FOUND, cd.table("no_such_table"));
    EXPECT_ERROR(DC_ERR_INVALID_ARGUMENT, cd.iter_traces(0));
    dc::ChromData moved = std::move(cd);
    CHECK(!cd && moved);
  }
  EXPECT_ERROR(DC_ERR_NOT_FOUND, dc::ChromData(stores + "/missing.cdz"));
}

// ---------------------------------------------------------------------------------------
// Typed access (BatchReader, Table, Batch, Column) on a hand-built stream of two record
// batches, the second one sliced (offset 1), with nulls, every string layout and bools:
//   i: int32 (null at row 1), d: float64, s: utf8, ls: large utf8,
//   k: dictionary<int16, utf8> (null at row 2), b: bool
// ---------------------------------------------------------------------------------------
struct HandBatch {
  std::vector<int32_t> i;
  std::vector<double> d;
  std::vector<int32_t> s_off;
  std::string s_chars;
  std::vector<int64_t> ls_off;
  std::string ls_chars;
  std::vector<int16_t> k;
  std::vector<int32_t> dict_off;
  std::string dict_chars;
  uint8_t i_valid = 0, k_valid = 0, b_bits = 0;
  const void *top_bufs[1] = {nullptr};
  const void *i_bufs[2], *d_bufs[2], *s_bufs[3], *ls_bufs[3], *k_bufs[2], *dict_bufs[3], *b_bufs[2];
  struct ArrowArray cols[6], dict;
  struct ArrowArray *col_ptrs[6];
};
static void no_release(struct ArrowArray *a) { a->release = nullptr; }
static int hand_batches_released = 0;
static void hand_release(struct ArrowArray *a) {
  delete static_cast<HandBatch *>(a->private_data);
  a->release = nullptr;
  hand_batches_released++;
}
static struct ArrowArray child(int64_t len, int64_t offset, int64_t nulls, int64_t n_bufs, const void **bufs) {
  return {len, nulls, offset, n_bufs, 0, bufs, nullptr, nullptr, no_release, nullptr};
}
// Rows (logical, after `offset`): the values of row r are i = 10 r, d = r + 0.5, s = "s<r>",
// ls = "L<r>", k = dictionary {"red", "green"}[r % 2], b = (r % 2 == 0).
static void hand_batch(struct ArrowArray *out, int64_t rows, int64_t offset) {
  auto *h = new HandBatch;
  int64_t n = rows + offset;
  h->s_off.push_back(0);
  h->ls_off.push_back(0);
  for (int64_t p = 0; p < n; p++) {
    int64_t r = p - offset;
    h->i.push_back(static_cast<int32_t>(10 * r));
    h->d.push_back(static_cast<double>(r) + 0.5);
    h->s_chars += "s" + std::to_string(r);
    h->s_off.push_back(static_cast<int32_t>(h->s_chars.size()));
    h->ls_chars += "L" + std::to_string(r);
    h->ls_off.push_back(static_cast<int64_t>(h->ls_chars.size()));
    h->k.push_back(static_cast<int16_t>(((r % 2) + 2) % 2));
    if (r != 1) h->i_valid |= static_cast<uint8_t>(1u << p);
    if (r != 2) h->k_valid |= static_cast<uint8_t>(1u << p);
    if (r % 2 == 0) h->b_bits |= static_cast<uint8_t>(1u << p);
  }
  h->dict_chars = "redgreen";
  h->dict_off = {0, 3, 8};
  h->i_bufs[0] = &h->i_valid; h->i_bufs[1] = h->i.data();
  h->d_bufs[0] = nullptr; h->d_bufs[1] = h->d.data();
  h->s_bufs[0] = nullptr; h->s_bufs[1] = h->s_off.data(); h->s_bufs[2] = h->s_chars.data();
  h->ls_bufs[0] = nullptr; h->ls_bufs[1] = h->ls_off.data(); h->ls_bufs[2] = h->ls_chars.data();
  h->k_bufs[0] = &h->k_valid; h->k_bufs[1] = h->k.data();
  h->dict_bufs[0] = nullptr; h->dict_bufs[1] = h->dict_off.data(); h->dict_bufs[2] = h->dict_chars.data();
  h->b_bufs[0] = nullptr; h->b_bufs[1] = &h->b_bits;
  const bool has_row1 = rows > 1, has_row2 = rows > 2;
  h->cols[0] = child(rows, offset, has_row1 ? 1 : 0, 2, h->i_bufs);
  h->cols[1] = child(rows, offset, 0, 2, h->d_bufs);
  h->cols[2] = child(rows, offset, 0, 3, h->s_bufs);
  h->cols[3] = child(rows, offset, 0, 3, h->ls_bufs);
  h->cols[4] = child(rows, offset, has_row2 ? -1 : 0, 2, h->k_bufs); // -1: null count unknown
  h->dict = child(2, 0, 0, 3, h->dict_bufs);
  h->cols[4].dictionary = &h->dict;
  h->cols[5] = child(rows, offset, 0, 2, h->b_bufs);
  for (int c = 0; c < 6; c++) h->col_ptrs[c] = &h->cols[c];
  *out = {rows, 0, 0, 1, 6, h->top_bufs, h->col_ptrs, nullptr, hand_release, h};
}

static struct ArrowSchema hs_i, hs_d, hs_s, hs_ls, hs_k, hs_kd, hs_b;
static struct ArrowSchema *hs_children[6] = {&hs_i, &hs_d, &hs_s, &hs_ls, &hs_k, &hs_b};
static void hand_schema_release(struct ArrowSchema *s) { s->release = nullptr; }
struct HandStream {
  int next = 0;
};
static int hand_get_schema(struct ArrowArrayStream *, struct ArrowSchema *out) {
  hs_i = {"i", "i", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  hs_d = {"g", "d", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  hs_s = {"u", "s", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  hs_ls = {"U", "ls", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  hs_kd = {"u", "", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  hs_k = {"s", "k", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, &hs_kd, nullptr, nullptr};
  hs_b = {"b", "b", nullptr, ARROW_FLAG_NULLABLE, 0, nullptr, nullptr, nullptr, nullptr};
  *out = {"+s", "", nullptr, 0, 6, hs_children, nullptr, hand_schema_release, nullptr};
  return 0;
}
static int hand_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
  auto *h = static_cast<HandStream *>(st->private_data);
  int k = h->next++;
  if (k == 0) hand_batch(out, 4, 0);
  else if (k == 1) hand_batch(out, 3, 1);
  else out->release = nullptr;
  return 0;
}
static const char *hand_last_error(struct ArrowArrayStream *) { return nullptr; }
static void hand_stream_release(struct ArrowArrayStream *st) {
  delete static_cast<HandStream *>(st->private_data);
  st->release = nullptr;
}
static dc::ArrowStream hand_stream() {
  struct ArrowArrayStream raw = {hand_get_schema, hand_get_next, hand_last_error,
                                 hand_stream_release, new HandStream};
  return dc::ArrowStream(&raw);
}

// Checks one hand batch (rows 0..n-1 as hand_batch describes them).
static void check_hand_batch(const dc::Batch &b, int64_t rows) {
  CHECK(b.num_rows() == rows && b.num_columns() == 6);
  CHECK((b.column_names() == std::vector<std::string>{"i", "d", "s", "ls", "k", "b"}));
  dc::view<int32_t> i = b.column<int32_t>("i");
  dc::view<double> d = b.column<double>("d");
  dc::Column ic = b.column("i"), s = b.column("s"), ls = b.column("ls"), k = b.column("k"), bc = b.column("b");
  CHECK(static_cast<int64_t>(i.size()) == rows && static_cast<int64_t>(d.size()) == rows);
  CHECK(ic.null_count() == (rows > 1 ? 1 : 0) && k.null_count() == (rows > 2 ? 1 : 0));
  CHECK(k.is_dictionary() && k.is_string() && s.is_string() && ls.is_string() && !ic.is_string());
  double dsum = 0;
  for (double v : d) dsum += v;
  CHECK(dsum == static_cast<double>(rows * (rows - 1)) / 2 + 0.5 * static_cast<double>(rows));
  for (int64_t r = 0; r < rows; r++) {
    CHECK(ic.is_valid(r) == (r != 1));
    if (ic.is_valid(r)) CHECK(i[static_cast<size_t>(r)] == 10 * r);
    CHECK(d[static_cast<size_t>(r)] == static_cast<double>(r) + 0.5);
    CHECK(s.str(r) == "s" + std::to_string(r));
    CHECK(ls.str(r) == "L" + std::to_string(r));
    CHECK(k.is_null(r) == (r == 2));
    CHECK(k.str(r) == (r == 2 ? "" : r % 2 ? "green" : "red"));
    if (r != 2) CHECK(k.index_at(r) == r % 2);
    CHECK(bc.boolean(r) == (r % 2 == 0));
  }
  // Wrong types and names are exceptions, never reinterpreted bytes.
  bool threw = false;
  try { (void)b.column<int64_t>("i"); } catch (const std::invalid_argument &) { threw = true; }
  CHECK(threw);
  threw = false;
  try { (void)b.column("s").values<double>(); } catch (const std::invalid_argument &) { threw = true; }
  CHECK(threw);
  threw = false;
  try { (void)b.column("d").str(0); } catch (const std::invalid_argument &) { threw = true; }
  CHECK(threw);
  threw = false;
  try { (void)b.column("nope"); } catch (const std::out_of_range &e) {
    threw = std::string(e.what()).find("columns: i, d, s, ls, k, b") != std::string::npos;
  }
  CHECK(threw);
  CHECK(b.has_column("ls") && !b.has_column("x"));
}

static void test_typed_columns() {
  hand_batches_released = 0;
  {
    dc::BatchReader reader(hand_stream());
    CHECK((reader.column_names() == std::vector<std::string>{"i", "d", "s", "ls", "k", "b"}));
    std::vector<int64_t> sizes;
    for (const dc::Batch &b : reader) {
      check_hand_batch(b, b.num_rows());
      sizes.push_back(b.num_rows());
    }
    CHECK((sizes == std::vector<int64_t>{4, 3}));
  }
  CHECK(hand_batches_released == 2); // every batch released once, by its Batch
  {
    dc::Table t(hand_stream());
    CHECK(t.num_rows() == 7 && t.num_batches() == 2);
    int64_t rows = 0;
    for (const dc::Batch &b : t) rows += b.num_rows();
    CHECK(rows == 7);
    check_hand_batch(t.batch(1), 3);
    dc::Table moved = std::move(t);
    CHECK(moved.num_rows() == 7);
  }
  CHECK(hand_batches_released == 4);
}

// Typed reading of what the library wrote (test_chromdata_writer's spots): chr1, in the
// canonical order of the spec (trace, then bin): t1 at 100, 200; t2 at 100, 300, 700.
static void test_typed_query(dc::ChromData &cd) {
  dc::Table t(cd.get_chrom("chr1"));
  CHECK(t.num_rows() == 5);
  std::vector<double> xs;
  std::vector<std::string> traces;
  std::vector<int32_t> bins;
  for (const dc::Batch &b : t) {
    for (double x : b.column<double>("x")) xs.push_back(x);
    for (int32_t v : b.column<int32_t>("bin_id")) bins.push_back(v);
    dc::Column tr = b.column("trace_id");
    for (int64_t r = 0; r < b.num_rows(); r++) traces.emplace_back(tr.str(r));
  }
  CHECK((xs == std::vector<double>{4, 6, 2, 3, 7}));
  CHECK((traces == std::vector<std::string>{"t1", "t1", "t2", "t2", "t2"}));
  CHECK(bins.size() == 5 && bins[0] == bins[2] && bins[0] < bins[1]);
  dc::Table bins_table(cd.table("bins"));
  std::vector<std::string> chroms;
  for (const dc::Batch &b : bins_table) {
    dc::Column c = b.column("chrom");
    for (int64_t r = 0; r < b.num_rows(); r++) chroms.emplace_back(c.str(r));
  }
  CHECK(chroms.size() == 6 && chroms.front() == "chr1" && chroms.back() == "chr2");
}

// A CSV of expected_csv.py (a header line, then comma-separated fields; "NA" = missing).
static std::vector<std::vector<std::string>> read_csv(const std::string &path) {
  std::vector<std::vector<std::string>> rows;
  FILE *f = std::fopen(path.c_str(), "r");
  if (!f) return rows;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    std::vector<std::string> fields(1);
    for (char *p = line; *p && *p != '\n' && *p != '\r'; p++) {
      if (*p == ',') fields.emplace_back();
      else fields.back() += *p;
    }
    rows.push_back(fields);
  }
  std::fclose(f);
  return rows;
}

// Typed query results against the pandas answers of make_stores.py (as CSV).
static void test_typed_against_pandas(const std::string &stores) {
  for (const char *q : {"trace_t0_coords.csv", "chrom_chr2_coords.csv"}) {
    auto want = read_csv(stores + "/csv/" + q);
    CHECK(want.size() > 1);
    if (want.size() < 2) continue;
    for (const char *name : {"main_20.chromdata.zarr", "main_21.cdz", "main_22.cdz"}) {
      dc::ChromData cd(stores + "/" + name);
      dc::Table t(q[0] == 't' ? cd.get_trace("t0", {"coords"}) : cd.get_chrom("chr2", {"coords"}));
      CHECK(t.column_names() == want[0]);
      CHECK(t.num_rows() + 1 == static_cast<int64_t>(want.size()));
      size_t row = 1;
      for (const dc::Batch &b : t) {
        dc::view<int32_t> bin = b.column<int32_t>("bin_id");
        dc::Column tr = b.column("trace_id"), cell = b.column("cell_id");
        dc::view<double> x = b.column<double>("x"), y = b.column<double>("y"), z = b.column<double>("z");
        for (int64_t r = 0; r < b.num_rows() && row < want.size(); r++, row++) {
          const auto &w = want[row];
          auto same = [](double got, const std::string &text) {
            return text == "NA" ? got != got : got == std::strtod(text.c_str(), nullptr);
          };
          size_t i = static_cast<size_t>(r);
          CHECK(std::to_string(bin[i]) == w[0] && std::string(tr.str(r)) == w[1] &&
                std::string(cell.str(r)) == w[2]);
          CHECK(same(x[i], w[3]) && same(y[i], w[4]) && same(z[i], w[5]));
        }
      }
    }
  }
}

int main(int argc, char **argv) {
  char tmpl[] = "/tmp/deltacells-cpp-XXXXXX";
  if (!mkdtemp(tmpl)) return 2;
  const std::string dir = tmpl;
  try {
    test_versions();
    test_tiles();
    test_stream_ownership();
    test_typed_columns();
    test_dataset(dir);
    test_chromdata_writer(dir);
    if (argc > 1) test_chromdata(argv[1]);
    if (argc > 1) test_typed_against_pandas(argv[1]);
    else std::printf("SKIPPED: ChromData tests (no store directory given)\n");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    failures++;
  }
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) failures++;
  if (failures) {
    std::fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  std::printf("all C++ tests passed\n");
  return 0;
}
