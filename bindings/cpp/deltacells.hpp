// deltacells.hpp -- C++17 wrapper of the libdeltacells C API (include/deltacells.h).
//
// Header-only and logic-free: every class and function below calls exactly the C functions
// it names and translates their conventions into C++ ones:
//
//   * a failing call throws deltacells::error, carrying the dc_status and dc_last_error();
//   * handles (dc_dataset, dc_batches, dc_writer, dc_chromdata, dc_chromdata_writer) and
//     Arrow streams are RAII, move-only; batches iterate with range-for;
//   * outputs come back as std::vector (CSR as struct Csr), strings as std::string;
//   * Arrow results (ArrowStream) can be read typed, without Arrow C++ or nanoarrow, through
//     BatchReader / Table / Batch / Column: spans over primitive columns, strings (also
//     dictionary-encoded), null bitmaps.
//
// Link with deltacells::deltacells or deltacells::deltacells_static (CMake), or
// `pkg-config --cflags --libs deltacells`. See docs/c-api.md for the rules of the C API
// (ownership, threads, errors); they hold here unchanged.
#ifndef DELTACELLS_HPP
#define DELTACELLS_HPP

#include "deltacells.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace deltacells {

// ----------------------------------------------------------------------------------------
// Errors and versions
// ----------------------------------------------------------------------------------------

/// Name of a status code, e.g. "DC_ERR_FORMAT" (dc_status_name).
inline const char *status_name(dc_status s) noexcept { return dc_status_name(s); }

/// The calling thread's last error message (dc_last_error).
inline std::string last_error() { return dc_last_error(); }

/// A failed libdeltacells call: status() is the dc_status, message() the library's one-line
/// message, what() "<function>: <STATUS_NAME>: <message>".
class error : public std::runtime_error {
public:
  error(dc_status status, const std::string &function, const std::string &message)
      : std::runtime_error(function + ": " + dc_status_name(status) + ": " + message),
        status_(status), message_(message) {}
  dc_status status() const noexcept { return status_; }
  const char *status_name() const noexcept { return dc_status_name(status_); }
  const std::string &message() const noexcept { return message_; }

private:
  dc_status status_;
  std::string message_;
};

/// A failing Arrow stream callback (get_schema / get_next): code() is its errno-style code.
class arrow_error : public std::runtime_error {
public:
  arrow_error(int code, const std::string &message)
      : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }

private:
  int code_;
};

namespace detail {
// Throws on failure; the message is read at once, before any other dc_ call.
inline void check(dc_status s, const char *function) {
  if (s != DC_OK) throw error(s, function, dc_last_error());
}

template <class V> struct dtype_of;
template <> struct dtype_of<int32_t> { static constexpr dc_dtype value = DC_INT32; };
template <> struct dtype_of<float> { static constexpr dc_dtype value = DC_FLOAT32; };

// Column lists as the C API takes them: NULL/0 for "all".
struct cstrings {
  explicit cstrings(const std::vector<std::string> &v) {
    ptrs.reserve(v.size());
    for (const auto &s : v) ptrs.push_back(s.c_str());
  }
  const char *const *data() const noexcept { return ptrs.empty() ? nullptr : ptrs.data(); }
  size_t size() const noexcept { return ptrs.size(); }
  std::vector<const char *> ptrs;
};

// Room for n elements, never a null pointer (the C API refuses NULL buffers when n is 0).
template <class T> inline void size_buffer(std::vector<T> &v, uint64_t n) {
  v.resize(static_cast<size_t>(n == 0 ? 1 : n));
}
} // namespace detail

/// Library version "MAJOR.MINOR.PATCH" (dc_version).
inline std::string version() { return dc_version(); }
/// ABI version of the loaded library (dc_abi_version).
inline uint32_t abi_version() noexcept { return dc_abi_version(); }
/// True when the loaded library implements the ABI this header describes.
inline bool abi_compatible() noexcept { return dc_abi_version() == DC_ABI_VERSION; }

// ----------------------------------------------------------------------------------------
// Spans and CSR matrices
// ----------------------------------------------------------------------------------------

/// A read-only view of contiguous elements (a C++17 stand-in for std::span<const T>).
template <class T> class view {
public:
  constexpr view() noexcept = default;
  constexpr view(const T *data, size_t size) noexcept : data_(data), size_(size) {}
  view(const std::vector<T> &v) noexcept : data_(v.data()), size_(v.size()) {}
  template <size_t N> constexpr view(const std::array<T, N> &a) noexcept : data_(a.data()), size_(N) {}
  template <size_t N> constexpr view(const T (&a)[N]) noexcept : data_(a), size_(N) {}
  constexpr const T *data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const T &operator[](size_t i) const noexcept { return data_[i]; }
  constexpr const T *begin() const noexcept { return data_; }
  constexpr const T *end() const noexcept { return data_ + size_; }

private:
  const T *data_ = nullptr;
  size_t size_ = 0;
};

/// Compressed sparse rows: row i holds entries indptr[i] .. indptr[i+1]-1 of indices/values.
template <class V> struct BasicCsr {
  std::vector<int64_t> indptr;  // n_rows + 1, starting at 0
  std::vector<int32_t> indices; // column (gene) of each entry, increasing within a row
  std::vector<V> values;        // counts
  size_t n_rows() const noexcept { return indptr.empty() ? 0 : indptr.size() - 1; }
  size_t nnz() const noexcept { return indices.size(); }
};
using Csr = BasicCsr<int32_t>;
using CsrF32 = BasicCsr<float>;

// ----------------------------------------------------------------------------------------
// Arrow C data / stream interface owners
// ----------------------------------------------------------------------------------------

/// Owns a struct ArrowSchema; releases it on destruction. Move-only.
class ArrowSchemaOwner {
public:
  ArrowSchemaOwner() noexcept { s_.release = nullptr; }
  ~ArrowSchemaOwner() { reset(); }
  ArrowSchemaOwner(ArrowSchemaOwner &&o) noexcept : s_(o.s_) { o.s_.release = nullptr; }
  ArrowSchemaOwner &operator=(ArrowSchemaOwner &&o) noexcept {
    if (this != &o) { reset(); s_ = o.s_; o.s_.release = nullptr; }
    return *this;
  }
  ArrowSchemaOwner(const ArrowSchemaOwner &) = delete;
  ArrowSchemaOwner &operator=(const ArrowSchemaOwner &) = delete;
  void reset() noexcept { if (s_.release) s_.release(&s_); s_.release = nullptr; }
  bool valid() const noexcept { return s_.release != nullptr; }
  struct ArrowSchema *get() noexcept { return &s_; }
  const struct ArrowSchema *operator->() const noexcept { return &s_; }

private:
  struct ArrowSchema s_;
};

/// Owns a struct ArrowArray; releases it on destruction unless it was moved into the library
/// (which marks it released). Move-only.
class ArrowArrayOwner {
public:
  ArrowArrayOwner() noexcept { a_.release = nullptr; }
  ~ArrowArrayOwner() { reset(); }
  ArrowArrayOwner(ArrowArrayOwner &&o) noexcept : a_(o.a_) { o.a_.release = nullptr; }
  ArrowArrayOwner &operator=(ArrowArrayOwner &&o) noexcept {
    if (this != &o) { reset(); a_ = o.a_; o.a_.release = nullptr; }
    return *this;
  }
  ArrowArrayOwner(const ArrowArrayOwner &) = delete;
  ArrowArrayOwner &operator=(const ArrowArrayOwner &) = delete;
  void reset() noexcept { if (a_.release) a_.release(&a_); a_.release = nullptr; }
  bool valid() const noexcept { return a_.release != nullptr; }
  struct ArrowArray *get() noexcept { return &a_; }
  const struct ArrowArray *operator->() const noexcept { return &a_; }

private:
  struct ArrowArray a_;
};

/// Owns a struct ArrowArrayStream (as returned by the library) and calls its release on
/// destruction. Move-only. It stays valid after the handle that produced it is freed.
class ArrowStream {
public:
  ArrowStream() noexcept { s_.release = nullptr; }
  /// Takes ownership of *raw (which is then marked released).
  explicit ArrowStream(struct ArrowArrayStream *raw) noexcept : s_(*raw) { raw->release = nullptr; }
  ~ArrowStream() { reset(); }
  ArrowStream(ArrowStream &&o) noexcept : s_(o.s_) { o.s_.release = nullptr; }
  ArrowStream &operator=(ArrowStream &&o) noexcept {
    if (this != &o) { reset(); s_ = o.s_; o.s_.release = nullptr; }
    return *this;
  }
  ArrowStream(const ArrowStream &) = delete;
  ArrowStream &operator=(const ArrowStream &) = delete;

  bool valid() const noexcept { return s_.release != nullptr; }
  void reset() noexcept { if (s_.release) s_.release(&s_); s_.release = nullptr; }
  /// The C struct, still owned by this object (e.g. to hand to nanoarrow / Arrow C++ import,
  /// which then marks it released).
  struct ArrowArrayStream *get() noexcept { return &s_; }
  /// Gives up ownership: the returned struct must be released by the caller.
  struct ArrowArrayStream release() noexcept { struct ArrowArrayStream s = s_; s_.release = nullptr; return s; }

  /// The stream's schema (get_schema).
  ArrowSchemaOwner schema() {
    require_valid();
    ArrowSchemaOwner out;
    int rc = s_.get_schema(&s_, out.get());
    if (rc != 0) throw arrow_error(rc, stream_message("get_schema", rc));
    return out;
  }
  /// The next record batch (a struct array) into `out`; false at the end of the stream.
  bool next(ArrowArrayOwner &out) {
    require_valid();
    out.reset();
    int rc = s_.get_next(&s_, out.get());
    if (rc != 0) throw arrow_error(rc, stream_message("get_next", rc));
    return out.valid();
  }

private:
  void require_valid() const {
    if (!valid()) throw std::logic_error("deltacells::ArrowStream: the stream was released or moved from");
  }
  std::string stream_message(const char *what, int rc) {
    const char *m = s_.get_last_error ? s_.get_last_error(&s_) : nullptr;
    return std::string("ArrowArrayStream.") + what + " failed (" + std::to_string(rc) + ")" +
           (m ? std::string(": ") + m : std::string());
  }
  struct ArrowArrayStream s_;
};

// ----------------------------------------------------------------------------------------
// Typed access to Arrow results, without Arrow C++ or nanoarrow
// ----------------------------------------------------------------------------------------
//
// The library hands out tables as struct ArrowArrayStream (Arrow C stream interface). These
// classes read the buffers of such a stream as the Arrow C data interface defines them:
//
//   deltacells::BatchReader r(cd.get_chrom("chr21", {"coords"}));
//   for (const deltacells::Batch &b : r) {
//     deltacells::view<double> x = b.column<double>("x");       // a span over the buffer
//     deltacells::Column trace = b.column("trace_id");
//     for (int64_t i = 0; i < b.num_rows(); i++)
//       if (trace.is_valid(i)) use(trace.str(i), x[i]);        // utf8 as std::string_view
//   }
//
// A Column is a view into its Batch (valid while the Batch lives); a Batch owns its record
// batch and shares the stream's schema. Types a query returns (chromdata-zarr.md §15.1):
// int32 bin_id, utf8 or int64 ids, float64 / float32 coordinates, the extra columns as
// stored (integers, floats, bool, utf8); small tables (bins, cells, ...) may also carry
// dictionary-encoded utf8 columns, which str(i) reads through the dictionary.

namespace detail {
// The Arrow C format string of each primitive C++ type.
template <class T> struct arrow_format;
template <> struct arrow_format<int8_t> { static constexpr const char *value = "c"; };
template <> struct arrow_format<uint8_t> { static constexpr const char *value = "C"; };
template <> struct arrow_format<int16_t> { static constexpr const char *value = "s"; };
template <> struct arrow_format<uint16_t> { static constexpr const char *value = "S"; };
template <> struct arrow_format<int32_t> { static constexpr const char *value = "i"; };
template <> struct arrow_format<uint32_t> { static constexpr const char *value = "I"; };
template <> struct arrow_format<int64_t> { static constexpr const char *value = "l"; };
template <> struct arrow_format<uint64_t> { static constexpr const char *value = "L"; };
template <> struct arrow_format<float> { static constexpr const char *value = "f"; };
template <> struct arrow_format<double> { static constexpr const char *value = "g"; };

inline bool bit_is_set(const void *bits, int64_t i) noexcept {
  return (static_cast<const uint8_t *>(bits)[i >> 3] >> (i & 7)) & 1;
}
} // namespace detail

/// One column of a record batch: a borrowed view of its ArrowArray and ArrowSchema
/// (valid while the Batch it came from lives).
class Column {
public:
  Column(const struct ArrowSchema *schema, const struct ArrowArray *array) noexcept
      : s_(schema), a_(array) {}

  const char *name() const noexcept { return s_->name ? s_->name : ""; }
  /// The Arrow C format string ("g" float64, "l" int64, "u" utf8, ...); for a dictionary
  /// column, that of its indices (see is_dictionary()).
  const char *format() const noexcept { return s_->format; }
  int64_t size() const noexcept { return a_->length; }
  int64_t null_count() const noexcept {
    return a_->null_count >= 0 ? a_->null_count : count_nulls();
  }
  /// False where the value is null (the validity bitmap; no bitmap = all valid).
  bool is_valid(int64_t i) const noexcept {
    const void *bits = a_->n_buffers > 0 ? a_->buffers[0] : nullptr;
    return a_->null_count == 0 || bits == nullptr || detail::bit_is_set(bits, a_->offset + i);
  }
  bool is_null(int64_t i) const noexcept { return !is_valid(i); }

  /// True for a primitive column of C++ type T (double <-> "g", int64_t <-> "l", ...).
  template <class T> bool is() const noexcept {
    return s_->dictionary == nullptr && std::strcmp(s_->format, detail::arrow_format<T>::value) == 0;
  }
  /// The values of a primitive column of type T, as a span (slots under nulls hold
  /// unspecified values: check is_valid). Throws std::invalid_argument on another type.
  template <class T> view<T> values() const {
    static_assert(std::is_arithmetic_v<T>, "values<T>: T is a primitive number type");
    if (!is<T>())
      throw std::invalid_argument(std::string("deltacells::Column '") + name() + "' has Arrow type '" +
                                  describe() + "', not '" + detail::arrow_format<T>::value + "'");
    if (a_->length == 0) return view<T>();
    return view<T>(static_cast<const T *>(a_->buffers[1]) + a_->offset, static_cast<size_t>(a_->length));
  }
  /// Value i of a bool column ("b", bit-packed).
  bool boolean(int64_t i) const {
    if (s_->dictionary || std::strcmp(s_->format, "b") != 0)
      throw std::invalid_argument(std::string("deltacells::Column '") + name() + "' is not bool");
    return detail::bit_is_set(a_->buffers[1], a_->offset + i);
  }

  /// True for utf8 ("u"), large utf8 ("U"), or a dictionary of either.
  bool is_string() const noexcept {
    const struct ArrowSchema *v = s_->dictionary ? s_->dictionary : s_;
    return std::strcmp(v->format, "u") == 0 || std::strcmp(v->format, "U") == 0;
  }
  bool is_dictionary() const noexcept { return s_->dictionary != nullptr; }
  /// String i (UTF-8 bytes, valid while the Batch lives; empty under a null). Reads
  /// through the dictionary of a dictionary-encoded column. Throws std::invalid_argument
  /// if the column holds no strings.
  std::string_view str(int64_t i) const {
    if (!is_string())
      throw std::invalid_argument(std::string("deltacells::Column '") + name() + "' has Arrow type '" +
                                  describe() + "', not utf8");
    if (!is_valid(i)) return std::string_view();
    if (!s_->dictionary) return string_at(s_, a_, i);
    int64_t code = index_at(i);
    if (code < 0 || code >= a_->dictionary->length)
      throw std::out_of_range(std::string("deltacells::Column '") + name() + "': dictionary index " +
                              std::to_string(code) + " out of range");
    return string_at(s_->dictionary, a_->dictionary, code);
  }
  /// The dictionary index of row i of a dictionary column (any integer index type).
  int64_t index_at(int64_t i) const {
    if (!s_->dictionary) throw std::invalid_argument(std::string("deltacells::Column '") + name() + "' is not dictionary-encoded");
    const void *d = a_->buffers[1];
    int64_t j = a_->offset + i;
    switch (s_->format[0]) {
    case 'c': return static_cast<const int8_t *>(d)[j];
    case 'C': return static_cast<const uint8_t *>(d)[j];
    case 's': return static_cast<const int16_t *>(d)[j];
    case 'S': return static_cast<const uint16_t *>(d)[j];
    case 'i': return static_cast<const int32_t *>(d)[j];
    case 'I': return static_cast<const uint32_t *>(d)[j];
    case 'l': return static_cast<const int64_t *>(d)[j];
    case 'L': return static_cast<int64_t>(static_cast<const uint64_t *>(d)[j]);
    default: throw std::invalid_argument(std::string("deltacells::Column '") + name() + "': dictionary index type '" + s_->format + "'");
    }
  }

  /// The C structs, for types this class does not read (lists, structs, ...).
  const struct ArrowSchema *schema() const noexcept { return s_; }
  const struct ArrowArray *array() const noexcept { return a_; }

private:
  std::string describe() const {
    return s_->dictionary ? std::string("dictionary<") + s_->format + ", " + s_->dictionary->format + ">"
                          : std::string(s_->format);
  }
  int64_t count_nulls() const noexcept {
    int64_t n = 0;
    for (int64_t i = 0; i < a_->length; i++) n += !is_valid(i);
    return n;
  }
  static std::string_view string_at(const struct ArrowSchema *s, const struct ArrowArray *a, int64_t i) {
    int64_t j = a->offset + i, start, end;
    if (s->format[0] == 'u') {
      start = static_cast<const int32_t *>(a->buffers[1])[j];
      end = static_cast<const int32_t *>(a->buffers[1])[j + 1];
    } else {
      start = static_cast<const int64_t *>(a->buffers[1])[j];
      end = static_cast<const int64_t *>(a->buffers[1])[j + 1];
    }
    return std::string_view(static_cast<const char *>(a->buffers[2]) + start, static_cast<size_t>(end - start));
  }
  const struct ArrowSchema *s_;
  const struct ArrowArray *a_;
};

/// One record batch of a stream: owns the ArrowArray, shares the stream's schema.
/// Move-only (copies would share the buffers' ownership).
class Batch {
public:
  Batch() = default;
  Batch(std::shared_ptr<ArrowSchemaOwner> schema, ArrowArrayOwner &&array)
      : schema_(std::move(schema)), array_(std::move(array)) {
    if (std::strcmp((*schema_)->format, "+s") != 0)
      throw std::invalid_argument("deltacells::Batch: the stream does not carry record batches (struct arrays)");
    if (array_.valid() && array_->n_children != (*schema_)->n_children)
      throw std::invalid_argument("deltacells::Batch: the batch has " + std::to_string(array_->n_children) +
                                  " columns, its schema " + std::to_string((*schema_)->n_children));
  }
  int64_t num_rows() const noexcept { return array_.valid() ? array_->length : 0; }
  size_t num_columns() const noexcept { return array_.valid() ? static_cast<size_t>(array_->n_children) : 0; }
  /// Column i (in schema order).
  Column column(size_t i) const {
    if (i >= num_columns()) throw std::out_of_range("deltacells::Batch: column " + std::to_string(i) + " of " + std::to_string(num_columns()));
    return Column((*schema_)->children[i], array_->children[i]);
  }
  /// The column with this name; std::out_of_range (naming the columns there are) if none.
  Column column(const std::string &name) const { return column(index_of(name)); }
  /// The values of primitive column `name` as a span, e.g. column<double>("x").
  template <class T> view<T> column(const std::string &name) const { return column(name).values<T>(); }
  bool has_column(const std::string &name) const noexcept { return find(name) >= 0; }
  /// The column names, in order.
  std::vector<std::string> column_names() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < num_columns(); i++) out.push_back(column(i).name());
    return out;
  }
  /// The C structs (the batch stays owned by this object).
  const struct ArrowArray *array() const noexcept { return &*array_.operator->(); }
  const struct ArrowSchema *schema() const noexcept { return (*schema_).operator->(); }

private:
  int64_t find(const std::string &name) const noexcept {
    for (size_t i = 0; i < num_columns(); i++)
      if (name == ((*schema_)->children[i]->name ? (*schema_)->children[i]->name : "")) return static_cast<int64_t>(i);
    return -1;
  }
  size_t index_of(const std::string &name) const {
    int64_t i = find(name);
    if (i < 0) {
      std::string have;
      for (const auto &n : column_names()) have += (have.empty() ? "" : ", ") + n;
      throw std::out_of_range("deltacells::Batch: no column '" + name + "' (columns: " + have + ")");
    }
    return static_cast<size_t>(i);
  }
  std::shared_ptr<ArrowSchemaOwner> schema_;
  ArrowArrayOwner array_;
};

/// Reads a stream batch by batch: `for (const Batch &b : BatchReader(stream))`. Owns the
/// stream; the schema is read once, at construction.
class BatchReader {
public:
  explicit BatchReader(ArrowStream &&stream)
      : stream_(std::move(stream)), schema_(std::make_shared<ArrowSchemaOwner>(stream_.schema())) {
    if (std::strcmp((*schema_)->format, "+s") != 0)
      throw std::invalid_argument("deltacells::BatchReader: the stream does not carry record batches");
  }
  const struct ArrowSchema *schema() const noexcept { return (*schema_).operator->(); }
  /// The column names, in order.
  std::vector<std::string> column_names() const {
    std::vector<std::string> out;
    for (int64_t i = 0; i < schema()->n_children; i++)
      out.push_back(schema()->children[i]->name ? schema()->children[i]->name : "");
    return out;
  }
  /// The next batch into `out`; false (and `out` empty) at the end of the stream. Throws
  /// deltacells::arrow_error if the stream fails (e.g. a read error in the library).
  bool next(Batch &out) {
    ArrowArrayOwner a;
    if (!stream_.next(a)) {
      out = Batch();
      return false;
    }
    out = Batch(schema_, std::move(a));
    return true;
  }

  /// Single-pass input iterator over the remaining batches.
  class iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch *;
    using reference = const Batch &;
    iterator() = default;
    explicit iterator(BatchReader *r) : r_(r) { ++*this; }
    reference operator*() const noexcept { return current_; }
    pointer operator->() const noexcept { return &current_; }
    iterator &operator++() {
      if (r_ && !r_->next(current_)) r_ = nullptr;
      return *this;
    }
    bool operator==(const iterator &o) const noexcept { return r_ == o.r_; }
    bool operator!=(const iterator &o) const noexcept { return r_ != o.r_; }

  private:
    BatchReader *r_ = nullptr;
    Batch current_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

private:
  ArrowStream stream_;
  std::shared_ptr<ArrowSchemaOwner> schema_;
};

/// A whole stream read into memory: its batches, in order.
class Table {
public:
  explicit Table(ArrowStream &&stream) {
    BatchReader r(std::move(stream));
    names_ = r.column_names();
    Batch b;
    while (r.next(b)) {
      rows_ += b.num_rows();
      batches_.push_back(std::move(b));
    }
  }
  int64_t num_rows() const noexcept { return rows_; }
  size_t num_batches() const noexcept { return batches_.size(); }
  const Batch &batch(size_t i) const { return batches_.at(i); }
  const std::vector<std::string> &column_names() const noexcept { return names_; }
  std::vector<Batch>::const_iterator begin() const noexcept { return batches_.begin(); }
  std::vector<Batch>::const_iterator end() const noexcept { return batches_.end(); }

private:
  std::vector<std::string> names_;
  std::vector<Batch> batches_;
  int64_t rows_ = 0;
};

// ----------------------------------------------------------------------------------------
// Tiles (§2)
// ----------------------------------------------------------------------------------------

/// Validates a tile and returns its summary (dc_tile_inspect).
inline dc_tile_info tile_inspect(view<uint8_t> blob, bool verify_crc = true) {
  dc_tile_info info{};
  detail::check(dc_tile_inspect(blob.data(), blob.size(), verify_crc ? 1 : 0, &info), "dc_tile_inspect");
  return info;
}

/// Decodes a whole tile (dc_tile_decode) into CSR with values of type V (int32_t or float).
template <class V = int32_t>
inline BasicCsr<V> tile_decode(view<uint8_t> blob, uint32_t n_threads = 0, bool verify_crc = true) {
  dc_tile_info info = tile_inspect(blob, verify_crc);
  BasicCsr<V> out;
  out.indptr.resize(static_cast<size_t>(info.n_cells + 1));
  detail::size_buffer(out.indices, info.nnz);
  detail::size_buffer(out.values, info.nnz);
  uint64_t nnz = 0;
  detail::check(dc_tile_decode(blob.data(), blob.size(), n_threads, verify_crc ? 1 : 0,
                               detail::dtype_of<V>::value, out.indptr.data(), out.indices.data(),
                               out.values.data(), info.nnz, &nnz),
                "dc_tile_decode");
  out.indices.resize(static_cast<size_t>(nnz));
  out.values.resize(static_cast<size_t>(nnz));
  return out;
}

/// Encodes one tile from CSR rows (dc_tile_encode); returns the tile's bytes.
inline std::vector<uint8_t> tile_encode(uint64_t n_cells, uint32_t n_genes, const int64_t *indptr,
                                        const int32_t *indices, const int32_t *values,
                                        int32_t zstd_level = 19, uint32_t n_chunks = 0,
                                        uint32_t n_threads = 0) {
  uint8_t *blob = nullptr;
  size_t len = 0;
  detail::check(dc_tile_encode(n_cells, n_genes, indptr, indices, values, zstd_level, n_chunks,
                               n_threads, &blob, &len),
                "dc_tile_encode");
  struct guard { uint8_t *p; size_t n; ~guard() { dc_bytes_free(p, n); } } g{blob, len};
  return std::vector<uint8_t>(blob, blob + len);
}

/// Encodes a Csr (rows = cells) as one tile.
inline std::vector<uint8_t> tile_encode(const Csr &m, uint32_t n_genes, int32_t zstd_level = 19,
                                        uint32_t n_chunks = 0, uint32_t n_threads = 0) {
  if (m.indptr.empty()) throw std::invalid_argument("deltacells::tile_encode: empty indptr");
  return tile_encode(m.n_rows(), n_genes, m.indptr.data(), m.indices.data(), m.values.data(),
                     zstd_level, n_chunks, n_threads);
}

// ----------------------------------------------------------------------------------------
// Datasets, reading (§3)
// ----------------------------------------------------------------------------------------

/// Cells and nonzeros of one tile (dc_dataset_tile_bounds).
struct TileBounds {
  uint64_t first_cell;
  uint64_t n_cells;
  uint64_t nnz;
};

template <class V> class Batches;

/// An open dataset (dc_dataset). Move-only; may be used from several threads at once.
class Dataset {
public:
  /// Opens and validates a dataset: a directory or a URL (s3://, gs://, az://, http(s)://)
  /// (dc_dataset_open).
  explicit Dataset(const std::string &path) {
    detail::check(dc_dataset_open(path.c_str(), &h_), "dc_dataset_open");
  }
  /// Opens a dataset at a path or URL with "key=value" options (dc_dataset_open_opts, §7):
  /// object_store settings such as "aws_endpoint=...", and max_concurrency, timeout_ms, retries.
  Dataset(const std::string &path, const std::vector<std::string> &options) {
    detail::cstrings o(options);
    detail::check(dc_dataset_open_opts(path.c_str(), o.data(), o.size(), &h_),
                  "dc_dataset_open_opts");
  }
  /// Takes ownership of a handle from dc_dataset_open.
  static Dataset adopt(dc_dataset *h) noexcept { return Dataset(h); }
  ~Dataset() { dc_dataset_free(h_); }
  Dataset(Dataset &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Dataset &operator=(Dataset &&o) noexcept {
    if (this != &o) { dc_dataset_free(h_); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  Dataset(const Dataset &) = delete;
  Dataset &operator=(const Dataset &) = delete;

  dc_dataset *get() const noexcept { return h_; }
  /// Gives up ownership of the handle (the caller frees it with dc_dataset_free).
  dc_dataset *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  /// dc_dataset_set (DC_DATASET_THREADS, DC_DATASET_TILE_CACHE, DC_DATASET_VERIFY_CRC,
  /// DC_DATASET_CACHE_BYTES).
  void set(dc_dataset_param p, int64_t value) { detail::check(dc_dataset_set(h_, p, value), "dc_dataset_set"); }
  /// dc_dataset_param_bounds: the values set(p, v) accepts, {min, max} (inclusive).
  static std::pair<int64_t, int64_t> param_bounds(dc_dataset_param p) {
    int64_t lo = 0, hi = 0;
    detail::check(dc_dataset_param_bounds(p, &lo, &hi), "dc_dataset_param_bounds");
    return {lo, hi};
  }
  /// dc_dataset_set_cache_dir; an empty string restores the default location.
  void set_cache_dir(const std::string &dir) {
    detail::check(dc_dataset_set_cache_dir(h_, dir.empty() ? nullptr : dir.c_str()), "dc_dataset_set_cache_dir");
  }
  /// dc_dataset_info_get.
  dc_dataset_info info() const {
    dc_dataset_info out{};
    detail::check(dc_dataset_info_get(h_, &out), "dc_dataset_info_get");
    return out;
  }
  uint64_t n_cells() const { return info().n_cells; }
  uint32_t n_genes() const { return info().n_genes; }

  /// dc_dataset_tile_bounds.
  TileBounds tile_bounds(uint64_t tile) const {
    TileBounds b{};
    detail::check(dc_dataset_tile_bounds(h_, tile, &b.first_cell, &b.n_cells, &b.nnz), "dc_dataset_tile_bounds");
    return b;
  }
  /// dc_dataset_read_tile: the tile's cells as CSR (indptr local to the tile).
  template <class V = int32_t> BasicCsr<V> read_tile(uint64_t tile) {
    TileBounds b = tile_bounds(tile);
    BasicCsr<V> out;
    out.indptr.resize(static_cast<size_t>(b.n_cells + 1));
    detail::size_buffer(out.indices, b.nnz);
    detail::size_buffer(out.values, b.nnz);
    uint64_t nnz = 0;
    detail::check(dc_dataset_read_tile(h_, tile, detail::dtype_of<V>::value, out.indptr.data(),
                                       out.indices.data(), out.values.data(), b.nnz, &nnz),
                  "dc_dataset_read_tile");
    out.indices.resize(static_cast<size_t>(nnz));
    out.values.resize(static_cast<size_t>(nnz));
    return out;
  }
  /// dc_dataset_batch_nnz: the nonzeros a gather of these cells returns.
  uint64_t batch_nnz(view<uint64_t> cells) {
    uint64_t nnz = 0;
    detail::check(dc_dataset_batch_nnz(h_, cells.data(), cells.size(), &nnz), "dc_dataset_batch_nnz");
    return nnz;
  }
  /// dc_dataset_gather: row i of the result is cell cells[i] (any order, repeats allowed).
  template <class V = int32_t> BasicCsr<V> gather(view<uint64_t> cells) {
    uint64_t need = batch_nnz(cells);
    BasicCsr<V> out;
    out.indptr.resize(cells.size() + 1);
    detail::size_buffer(out.indices, need);
    detail::size_buffer(out.values, need);
    uint64_t nnz = 0;
    detail::check(dc_dataset_gather(h_, cells.data(), cells.size(), detail::dtype_of<V>::value,
                                    out.indptr.data(), out.indices.data(), out.values.data(), need, &nnz),
                  "dc_dataset_gather");
    out.indices.resize(static_cast<size_t>(nnz));
    out.values.resize(static_cast<size_t>(nnz));
    return out;
  }
  template <class V = int32_t> BasicCsr<V> gather(const uint64_t *cells, size_t n) {
    return gather<V>(view<uint64_t>(cells, n));
  }
  /// dc_dataset_batches: the cells in batches of batch_size rows, read ahead; iterate the
  /// result with range-for (defined below). It may outlive this Dataset.
  template <class V = int32_t>
  Batches<V> batches(view<uint64_t> cells, size_t batch_size, uint32_t read_ahead = 0);
  /// dc_dataset_shuffled_order: a block-shuffled permutation of all cells (tiles in random
  /// order, cells shuffled within windows of window_tiles tiles), the same for a seed on
  /// every platform.
  std::vector<uint64_t> shuffled_order(uint64_t seed, uint32_t window_tiles = 1) const {
    std::vector<uint64_t> out;
    detail::size_buffer(out, n_cells());
    detail::check(dc_dataset_shuffled_order(h_, seed, window_tiles, out.data(), out.size()),
                  "dc_dataset_shuffled_order");
    out.resize(static_cast<size_t>(n_cells()));
    return out;
  }

  /// dc_dataset_gene_order: output column j was input column result[j].
  std::vector<int32_t> gene_order() const {
    std::vector<int32_t> out(n_genes());
    detail::check(dc_dataset_gene_order(h_, out.data(), out.size()), "dc_dataset_gene_order");
    return out;
  }
  /// dc_dataset_var_name: the name of output column `gene`.
  std::string var_name(uint32_t gene) const {
    const char *name = nullptr;
    detail::check(dc_dataset_var_name(h_, gene, &name), "dc_dataset_var_name");
    return name;
  }
  /// All gene names, in output column order (dc_dataset_var_name for each column).
  std::vector<std::string> var_names() const {
    uint32_t n = n_genes();
    std::vector<std::string> out;
    out.reserve(n);
    for (uint32_t g = 0; g < n; g++) out.push_back(var_name(g));
    return out;
  }
  /// dc_dataset_var_table: the gene table as an Arrow stream.
  ArrowStream var_table() {
    struct ArrowArrayStream s;
    detail::check(dc_dataset_var_table(h_, &s), "dc_dataset_var_table");
    return ArrowStream(&s);
  }
  /// dc_dataset_obs: obs columns (empty = all) as an Arrow stream, one batch per tile.
  ArrowStream obs(const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_dataset_obs(h_, c.data(), c.size(), &s), "dc_dataset_obs");
    return ArrowStream(&s);
  }

private:
  explicit Dataset(dc_dataset *h) noexcept : h_(h) {}
  dc_dataset *h_ = nullptr;
};

/// Batches of a dataset's cells in a declared order, prepared ahead on the dataset's pool
/// (dc_batches). Move-only; one thread at a time. Range-for yields each batch as a
/// BasicCsr<V> (rows in the order of the cells given); the buffers are reused from batch
/// to batch. A batch that fails to read throws deltacells::error from the step that reaches
/// it; that batch is then consumed and next() goes on with the following one.
template <class V = int32_t> class Batches {
public:
  /// dc_dataset_batches (read_ahead 0 = 2).
  Batches(Dataset &ds, view<uint64_t> cells, size_t batch_size, uint32_t read_ahead = 0) {
    detail::check(dc_dataset_batches(ds.get(), cells.data(), cells.size(), batch_size, read_ahead, &h_),
                  "dc_dataset_batches");
  }
  ~Batches() { dc_batches_free(h_); }
  Batches(Batches &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Batches &operator=(Batches &&o) noexcept {
    if (this != &o) { dc_batches_free(h_); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  Batches(const Batches &) = delete;
  Batches &operator=(const Batches &) = delete;
  dc_batches *get() const noexcept { return h_; }

  /// dc_batches_peek: (rows, nonzeros) of the next batch; rows 0 at the end.
  std::pair<uint64_t, uint64_t> peek() {
    uint64_t rows = 0, nnz = 0;
    detail::check(dc_batches_peek(h_, &rows, &nnz), "dc_batches_peek");
    return {rows, nnz};
  }
  /// dc_batches_next into `out` (resized to the batch); false at the end.
  bool next(BasicCsr<V> &out) {
    uint64_t rows = 0, need = 0;
    dc_status s = dc_batches_peek(h_, &rows, &need);
    if (s != DC_OK) {
      // dc_batches_next hands out (consumes) the batch that failed, with the same error.
      uint64_t r = 0, z = 0;
      detail::check(dc_batches_next(h_, detail::dtype_of<V>::value, nullptr, nullptr, nullptr, 0, &r, &z),
                    "dc_batches_next");
      detail::check(s, "dc_batches_peek");
    }
    if (rows == 0) return false;
    out.indptr.resize(static_cast<size_t>(rows + 1));
    detail::size_buffer(out.indices, need);
    detail::size_buffer(out.values, need);
    uint64_t got_rows = 0, nnz = 0;
    detail::check(dc_batches_next(h_, detail::dtype_of<V>::value, out.indptr.data(), out.indices.data(),
                                  out.values.data(), need, &got_rows, &nnz),
                  "dc_batches_next");
    out.indptr.resize(static_cast<size_t>(got_rows + 1));
    out.indices.resize(static_cast<size_t>(nnz));
    out.values.resize(static_cast<size_t>(nnz));
    return got_rows > 0;
  }

  /// Input iterator over the batches (range-for).
  class iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BasicCsr<V>;
    using difference_type = std::ptrdiff_t;
    using pointer = const BasicCsr<V> *;
    using reference = const BasicCsr<V> &;
    iterator() noexcept = default;
    explicit iterator(Batches *b) : b_(b) { advance(); }
    reference operator*() const noexcept { return current_; }
    pointer operator->() const noexcept { return &current_; }
    iterator &operator++() { advance(); return *this; }
    bool operator==(const iterator &o) const noexcept { return b_ == o.b_; }
    bool operator!=(const iterator &o) const noexcept { return b_ != o.b_; }

  private:
    void advance() {
      if (b_ && !b_->next(current_)) b_ = nullptr;
    }
    Batches *b_ = nullptr;
    BasicCsr<V> current_;
  };
  iterator begin() { return iterator(this); }
  iterator end() noexcept { return iterator(); }

private:
  dc_batches *h_ = nullptr;
};

template <class V>
inline Batches<V> Dataset::batches(view<uint64_t> cells, size_t batch_size, uint32_t read_ahead) {
  return Batches<V>(*this, cells, batch_size, read_ahead);
}

// ----------------------------------------------------------------------------------------
// Datasets, writing (§4)
// ----------------------------------------------------------------------------------------

/// A dataset being written (dc_writer). Move-only; one thread at a time. Destroying it
/// without finish() abandons the write (nothing appears at the target).
class Writer {
public:
  /// dc_writer_create (a directory, or an s3:// / gs:// / az:// prefix).
  Writer(const std::string &path, uint32_t n_genes) {
    detail::check(dc_writer_create(path.c_str(), n_genes, &h_), "dc_writer_create");
  }
  /// dc_writer_create_opts: with "key=value" options (§7).
  Writer(const std::string &path, uint32_t n_genes, const std::vector<std::string> &options) {
    detail::cstrings o(options);
    detail::check(dc_writer_create_opts(path.c_str(), n_genes, o.data(), o.size(), &h_),
                  "dc_writer_create_opts");
  }
  static Writer adopt(dc_writer *h) noexcept { return Writer(h); }
  ~Writer() { dc_writer_free(h_); }
  Writer(Writer &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Writer &operator=(Writer &&o) noexcept {
    if (this != &o) { dc_writer_free(h_); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  Writer(const Writer &) = delete;
  Writer &operator=(const Writer &) = delete;

  dc_writer *get() const noexcept { return h_; }
  dc_writer *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  /// dc_writer_set (DC_WRITER_*).
  void set(dc_writer_param p, int64_t value) { detail::check(dc_writer_set(h_, p, value), "dc_writer_set"); }
  /// dc_writer_param_bounds: the values set(p, v) accepts, {min, max} (inclusive).
  static std::pair<int64_t, int64_t> param_bounds(dc_writer_param p) {
    int64_t lo = 0, hi = 0;
    detail::check(dc_writer_param_bounds(p, &lo, &hi), "dc_writer_param_bounds");
    return {lo, hi};
  }
  /// dc_writer_set_gene_order: output column j = input column order[j].
  void set_gene_order(view<int32_t> order) {
    detail::check(dc_writer_set_gene_order(h_, order.data(), order.size()), "dc_writer_set_gene_order");
  }
  /// dc_writer_set_var_names, in input column order.
  void set_var_names(const std::vector<std::string> &names) {
    detail::cstrings c(names);
    detail::check(dc_writer_set_var_names(h_, c.data(), c.size()), "dc_writer_set_var_names");
  }
  /// dc_writer_append_csr: n_rows cells in input column space.
  void append_csr(uint64_t n_rows, const int64_t *indptr, const int32_t *indices, const int32_t *values) {
    detail::check(dc_writer_append_csr(h_, n_rows, indptr, indices, values), "dc_writer_append_csr");
  }
  void append_csr(const Csr &rows) {
    if (rows.indptr.empty()) throw std::invalid_argument("deltacells::Writer::append_csr: empty indptr");
    append_csr(rows.n_rows(), rows.indptr.data(), rows.indices.data(), rows.values.data());
  }
  /// dc_writer_append_obs: `batch` is moved into the library (released even on error);
  /// `schema` is only borrowed.
  void append_obs(struct ArrowArray *batch, struct ArrowSchema *schema) {
    detail::check(dc_writer_append_obs(h_, batch, schema), "dc_writer_append_obs");
  }
  void append_obs(ArrowArrayOwner &batch, ArrowSchemaOwner &schema) { append_obs(batch.get(), schema.get()); }
  /// dc_writer_set_var_table: `table` is moved into the library; `schema` borrowed.
  void set_var_table(struct ArrowArray *table, struct ArrowSchema *schema) {
    detail::check(dc_writer_set_var_table(h_, table, schema), "dc_writer_set_var_table");
  }
  void set_var_table(ArrowArrayOwner &table, ArrowSchemaOwner &schema) { set_var_table(table.get(), schema.get()); }
  /// dc_writer_finish: the dataset appears complete, atomically.
  void finish() { detail::check(dc_writer_finish(h_), "dc_writer_finish"); }

private:
  explicit Writer(dc_writer *h) noexcept : h_(h) {}
  dc_writer *h_ = nullptr;
};

// ----------------------------------------------------------------------------------------
// ChromData stores, reading (§5)
// ----------------------------------------------------------------------------------------

/// An open ChromData store (dc_chromdata). Move-only; may be used from several threads.
class ChromData {
public:
  /// dc_chromdata_open: a *.chromdata.zarr directory or a .cdz file, or a URL of one
  /// (s3://, gs://, az://, http(s)://; a last component ending in .cdz is a .cdz object).
  explicit ChromData(const std::string &path) {
    detail::check(dc_chromdata_open(path.c_str(), &h_), "dc_chromdata_open");
  }
  /// Opens a store at a path or URL with "key=value" options (dc_chromdata_open_opts, §7):
  /// object_store settings such as "aws_endpoint=...", and max_concurrency, timeout_ms, retries.
  ChromData(const std::string &path, const std::vector<std::string> &options) {
    detail::cstrings o(options);
    detail::check(dc_chromdata_open_opts(path.c_str(), o.data(), o.size(), &h_),
                  "dc_chromdata_open_opts");
  }
  static ChromData adopt(dc_chromdata *h) noexcept { return ChromData(h); }
  ~ChromData() { dc_chromdata_free(h_); }
  ChromData(ChromData &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ChromData &operator=(ChromData &&o) noexcept {
    if (this != &o) { dc_chromdata_free(h_); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  ChromData(const ChromData &) = delete;
  ChromData &operator=(const ChromData &) = delete;

  dc_chromdata *get() const noexcept { return h_; }
  dc_chromdata *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  /// dc_chromdata_info_get.
  dc_chromdata_info info() const {
    dc_chromdata_info out{};
    detail::check(dc_chromdata_info_get(h_, &out), "dc_chromdata_info_get");
    return out;
  }
  /// dc_chromdata_table: "bins", "bin_tracks", "traces", "cells", "intervals/<key>", "points/<key>".
  ArrowStream table(const std::string &name) {
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_table(h_, name.c_str(), &s), "dc_chromdata_table");
    return ArrowStream(&s);
  }
  /// dc_chromdata_keys: original keys of a kind ("layers", "intervals", ...).
  ArrowStream keys(const std::string &kind) {
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_keys(h_, kind.c_str(), &s), "dc_chromdata_keys");
    return ArrowStream(&s);
  }
  /// dc_chromdata_categories: the category list of a coded column.
  ArrowStream categories(const std::string &table, const std::string &column) {
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_categories(h_, table.c_str(), column.c_str(), &s), "dc_chromdata_categories");
    return ArrowStream(&s);
  }
  /// dc_chromdata_get_trace (columns empty = all; {"coords"} = keys + x, y, z).
  ArrowStream get_trace(const std::string &trace_id, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_get_trace(h_, trace_id.c_str(), c.data(), c.size(), &s), "dc_chromdata_get_trace");
    return ArrowStream(&s);
  }
  /// dc_chromdata_get_cell.
  ArrowStream get_cell(const std::string &cell_id, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_get_cell(h_, cell_id.c_str(), c.data(), c.size(), &s), "dc_chromdata_get_cell");
    return ArrowStream(&s);
  }
  /// dc_chromdata_get_chrom.
  ArrowStream get_chrom(const std::string &chrom, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_get_chrom(h_, chrom.c_str(), c.data(), c.size(), &s), "dc_chromdata_get_chrom");
    return ArrowStream(&s);
  }
  /// dc_chromdata_iter_traces: batches of `batch` whole runs.
  ArrowStream iter_traces(uint64_t batch, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_iter_traces(h_, batch, c.data(), c.size(), &s), "dc_chromdata_iter_traces");
    return ArrowStream(&s);
  }
  /// dc_chromdata_iter_cells: batches of `batch` cell segments.
  ArrowStream iter_cells(uint64_t batch, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_iter_cells(h_, batch, c.data(), c.size(), &s), "dc_chromdata_iter_cells");
    return ArrowStream(&s);
  }
  /// dc_chromdata_read_spots: the whole spot table (original_order: as written).
  ArrowStream read_spots(bool original_order = false, const std::vector<std::string> &columns = {}) {
    detail::cstrings c(columns);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_read_spots(h_, original_order ? 1 : 0, c.data(), c.size(), &s),
                  "dc_chromdata_read_spots");
    return ArrowStream(&s);
  }

  /// dc_chromdata_attrs: metadata of a pass-through entry as JSON text. `path`: the
  /// original key, then member keys inside results mappings; empty for "uns", "contacts"
  /// and "links".
  std::string attrs(const std::string &kind, const std::vector<std::string> &path = {}) {
    detail::cstrings p(path);
    uint8_t *json = nullptr;
    size_t len = 0;
    detail::check(dc_chromdata_attrs(h_, kind.c_str(), p.data(), p.size(), &json, &len), "dc_chromdata_attrs");
    std::string out(reinterpret_cast<const char *>(json), len);
    dc_bytes_free(json, len);
    return out;
  }
  /// dc_chromdata_array: a "cellm" / "binm" / "results" / "uns" array as one batch with one
  /// column "value" (nested fixed-size lists; field metadata "shape").
  ArrowStream array(const std::string &kind, const std::vector<std::string> &path) {
    detail::cstrings p(path);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_array(h_, kind.c_str(), p.data(), p.size(), &s), "dc_chromdata_array");
    return ArrowStream(&s);
  }
  /// dc_chromdata_result_table: a results entry of type table.
  ArrowStream result_table(const std::vector<std::string> &path) {
    detail::cstrings p(path);
    struct ArrowArrayStream s;
    detail::check(dc_chromdata_result_table(h_, p.data(), p.size(), &s), "dc_chromdata_result_table");
    return ArrowStream(&s);
  }

private:
  explicit ChromData(dc_chromdata *h) noexcept : h_(h) {}
  dc_chromdata *h_ = nullptr;
};

// ----------------------------------------------------------------------------------------
// ChromData stores, writing (§6)
// ----------------------------------------------------------------------------------------

/// A ChromData store being written (dc_chromdata_writer). Move-only; one thread at a time.
/// Destroying it without finish() abandons the write (nothing appears at the target).
class ChromDataWriter {
public:
  /// dc_chromdata_writer_create: a *.chromdata.zarr directory, or a zip if path ends in .cdz.
  explicit ChromDataWriter(const std::string &path) {
    detail::check(dc_chromdata_writer_create(path.c_str(), &h_), "dc_chromdata_writer_create");
  }
  /// dc_chromdata_writer_create_opts: at a path or URL (s3://, gs://, az://) with "key=value"
  /// options (§7). To a URL the store is built locally and uploaded by finish().
  ChromDataWriter(const std::string &path, const std::vector<std::string> &options) {
    detail::cstrings o(options);
    detail::check(dc_chromdata_writer_create_opts(path.c_str(), o.data(), o.size(), &h_),
                  "dc_chromdata_writer_create_opts");
  }
  static ChromDataWriter adopt(dc_chromdata_writer *h) noexcept { return ChromDataWriter(h); }
  ~ChromDataWriter() { dc_chromdata_writer_free(h_); }
  ChromDataWriter(ChromDataWriter &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ChromDataWriter &operator=(ChromDataWriter &&o) noexcept {
    if (this != &o) { dc_chromdata_writer_free(h_); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  ChromDataWriter(const ChromDataWriter &) = delete;
  ChromDataWriter &operator=(const ChromDataWriter &) = delete;

  dc_chromdata_writer *get() const noexcept { return h_; }
  dc_chromdata_writer *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  /// dc_chromdata_writer_set (DC_CDW_*).
  void set(dc_chromdata_writer_param p, int64_t value) {
    detail::check(dc_chromdata_writer_set(h_, p, value), "dc_chromdata_writer_set");
  }
  /// dc_chromdata_writer_param_bounds: the values set(p, v) accepts, {min, max} (inclusive).
  static std::pair<int64_t, int64_t> param_bounds(dc_chromdata_writer_param p) {
    int64_t lo = 0, hi = 0;
    detail::check(dc_chromdata_writer_param_bounds(p, &lo, &hi), "dc_chromdata_writer_param_bounds");
    return {lo, hi};
  }
  /// dc_chromdata_writer_set_bins: `bins` is moved into the library; `schema` borrowed.
  void set_bins(struct ArrowArray *bins, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_set_bins(h_, bins, schema), "dc_chromdata_writer_set_bins");
  }
  void set_bins(ArrowArrayOwner &bins, ArrowSchemaOwner &schema) { set_bins(bins.get(), schema.get()); }
  /// dc_chromdata_writer_append: spots in any order; `batch` moved in, `schema` borrowed.
  void append(struct ArrowArray *batch, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_append(h_, batch, schema), "dc_chromdata_writer_append");
  }
  void append(ArrowArrayOwner &batch, ArrowSchemaOwner &schema) { append(batch.get(), schema.get()); }
  /// dc_chromdata_writer_set_bin_tracks: one row per bin of set_bins' table; moved in.
  void set_bin_tracks(struct ArrowArray *table, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_set_bin_tracks(h_, table, schema),
                  "dc_chromdata_writer_set_bin_tracks");
  }
  void set_bin_tracks(ArrowArrayOwner &table, ArrowSchemaOwner &schema) {
    set_bin_tracks(table.get(), schema.get());
  }
  /// dc_chromdata_writer_add_table: a pass-through table, `collection` "intervals" (with a
  /// `kind`) or "points" (empty `kind`); `table` moved in, `schema` borrowed.
  void add_table(const std::string &collection, const std::string &key, const std::string &kind,
                 struct ArrowArray *table, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_add_table(h_, collection.c_str(), key.c_str(),
                                                kind.empty() ? nullptr : kind.c_str(), table,
                                                schema),
                  "dc_chromdata_writer_add_table");
  }
  void add_table(const std::string &collection, const std::string &key, const std::string &kind,
                 ArrowArrayOwner &table, ArrowSchemaOwner &schema) {
    add_table(collection, key, kind, table.get(), schema.get());
  }
  /// dc_chromdata_writer_set_categories: the category list of "trace_id", "cell_id" or an
  /// extra categorical column (a one-column batch, moved in); before the first append.
  void set_categories(const std::string &column, struct ArrowArray *values, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_set_categories(h_, column.c_str(), values, schema),
                  "dc_chromdata_writer_set_categories");
  }
  void set_categories(const std::string &column, ArrowArrayOwner &values, ArrowSchemaOwner &schema) {
    set_categories(column, values.get(), schema.get());
  }
  /// dc_chromdata_writer_set_table: the "traces" or "cells" annotation table (moved in).
  void set_table(const std::string &name, struct ArrowArray *table, struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_set_table(h_, name.c_str(), table, schema), "dc_chromdata_writer_set_table");
  }
  void set_table(const std::string &name, ArrowArrayOwner &table, ArrowSchemaOwner &schema) {
    set_table(name, table.get(), schema.get());
  }
  /// dc_chromdata_writer_add_array: a "cellm" or "binm" array as dc_chromdata_array returns
  /// it (one column "value", nested fixed-size lists), moved in.
  void add_array(const std::string &kind, const std::string &key, struct ArrowArray *array,
                 struct ArrowSchema *schema) {
    detail::check(dc_chromdata_writer_add_array(h_, kind.c_str(), key.c_str(), array, schema),
                  "dc_chromdata_writer_add_array");
  }
  void add_array(const std::string &kind, const std::string &key, ArrowArrayOwner &array,
                 ArrowSchemaOwner &schema) {
    add_array(kind, key, array.get(), schema.get());
  }
  /// dc_chromdata_writer_add_result: a results entry at `path` with its attributes as JSON
  /// ("type" required); `data` the table or array batch (moved in), nullptr for json and
  /// mapping entries.
  void add_result(const std::vector<std::string> &path, const std::string &attrs_json,
                  struct ArrowArray *data = nullptr, struct ArrowSchema *schema = nullptr) {
    detail::cstrings p(path);
    detail::check(dc_chromdata_writer_add_result(h_, p.data(), p.size(), attrs_json.c_str(), data, schema),
                  "dc_chromdata_writer_add_result");
  }
  void add_result(const std::vector<std::string> &path, const std::string &attrs_json,
                  ArrowArrayOwner &data, ArrowSchemaOwner &schema) {
    add_result(path, attrs_json, data.get(), schema.get());
  }
  /// dc_chromdata_writer_set_json: ("uns" | "contacts" | "links", no key, JSON) or
  /// ("intervals", key, {"source_result": ...}); an empty `key` passes NULL.
  void set_json(const std::string &kind, const std::string &key, const std::string &json) {
    detail::check(dc_chromdata_writer_set_json(h_, kind.c_str(), key.empty() ? nullptr : key.c_str(), json.c_str()),
                  "dc_chromdata_writer_set_json");
  }
  /// dc_chromdata_writer_finish: sort, index, and move the store into place atomically.
  void finish() { detail::check(dc_chromdata_writer_finish(h_), "dc_chromdata_writer_finish"); }

private:
  explicit ChromDataWriter(dc_chromdata_writer *h) noexcept : h_(h) {}
  dc_chromdata_writer *h_ = nullptr;
};

/// dc_chromdata_rewrite: store `src` (any version, layout, directory or .cdz) written again
/// at `dst` in `layout` with everything it holds, the original order recoverable.
inline void rewrite(const std::string &src, const std::string &dst, dc_layout layout = DC_LAYOUT_PRIMARY_COORDS,
                    bool overwrite = false) {
  detail::check(dc_chromdata_rewrite(src.c_str(), dst.c_str(), layout, overwrite ? 1 : 0), "dc_chromdata_rewrite");
}

} // namespace deltacells

#endif // DELTACELLS_HPP
