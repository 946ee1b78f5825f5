// Small RAII layer over the HDF5 C API (the C++ API is not supported with parallel builds and
// exposes no MPI-IO calls, docs/reference.md "HDF5", so we wrap hid_t ourselves).
//
// Every HDF5 call goes through H5_CHECK with a message that names the file and the object
// ("result.h5:/baseline/sequences/prompt_index"). HDF5's own error-stack printing is turned off
// (silence_error_printing, called by every File::create/open); the innermost lines of HDF5's
// error stack are appended to our message instead.
//
// Conventions: datasets that grow are "row tables": shape [rows, trailing...], unlimited along
// axis 0, chunked; numbers are stored as little-endian standard types and read back as native
// types (HDF5 converts); strings are variable-length UTF-8 (h5py reads attributes as str and
// datasets as bytes, `.asstr()` gives str). Not thread-safe: use one File per thread.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace specrun::h5 {

// Turns off HDF5's automatic error printing for the calling thread (the setting is per thread
// in thread-safe HDF5 builds such as Debian's). Cheap; idempotent.
void silence_error_printing();

// HDF5 never closes identifiers at process exit in specrun (H5dont_atexit, set by a static
// initializer of h5.cpp before the library starts): every file is closed where it was opened,
// and one still open at exit is one whose writes failed (a full disk). Closing it at exit would
// flush its caches again into a file that holds a consistent last commit (and crashed inside
// libhdf5 1.10's shutdown, issue 40); the kernel closes its descriptor instead. True when the
// setting took effect (the library had not started before).
bool cleanup_at_exit_disabled();

// The calling thread's HDF5 error stack as one line, innermost entry first, e.g.
// "unable to open file: name = 'x.h5', errno = 2, error message = 'No such file or directory'".
// Empty when the stack is empty.
std::string error_stack_text();

// Owns one HDF5 identifier of any kind (file, group, dataset, dataspace, datatype, property list,
// attribute) and releases it with H5Idec_ref. Move-only.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& other) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Releases the identifier (errors ignored: destructors must not throw).
  void reset();
  // Gives up ownership without closing.
  hid_t release();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Standard little-endian file types and native memory types for the scalars we store.
template <typename T>
struct TypeOf;
template <>
struct TypeOf<int8_t> {
  static hid_t file() { return H5T_STD_I8LE; }
  static hid_t mem() { return H5T_NATIVE_INT8; }
};
template <>
struct TypeOf<uint8_t> {
  static hid_t file() { return H5T_STD_U8LE; }
  static hid_t mem() { return H5T_NATIVE_UINT8; }
};
template <>
struct TypeOf<int32_t> {
  static hid_t file() { return H5T_STD_I32LE; }
  static hid_t mem() { return H5T_NATIVE_INT32; }
};
template <>
struct TypeOf<int64_t> {
  static hid_t file() { return H5T_STD_I64LE; }
  static hid_t mem() { return H5T_NATIVE_INT64; }
};
template <>
struct TypeOf<float> {
  static hid_t file() { return H5T_IEEE_F32LE; }
  static hid_t mem() { return H5T_NATIVE_FLOAT; }
};
template <>
struct TypeOf<double> {
  static hid_t file() { return H5T_IEEE_F64LE; }
  static hid_t mem() { return H5T_NATIVE_DOUBLE; }
};

// Current time as ISO-8601 UTC with seconds, "2025-06-01T12:34:56Z" (for file attributes).

// A new variable-length UTF-8 string type.
Id string_type();
// A new 16-bit float type: bfloat16 (sign, 8-bit exponent, 7-bit mantissa; the top half of an
// IEEE float32) or IEEE half (5-bit exponent, 10-bit mantissa). HDF5 converts either to and from
// float32 on read and write, so h5py reads them as float32 (bfloat16) and float16.
Id bfloat16_type();
Id float16_type();
// A new 8-bit enum type {FALSE = 0, TRUE = 1}: the type h5py uses for numpy.bool_.
Id bool_type();

class Dataset;
class Group;

// Something with attributes: a file's root group, a group or a dataset.
class Object {
 public:
  hid_t id() const { return id_.get(); }
  bool valid() const { return id_.valid(); }
  // "file.h5:/group/name", used in every error message.
  const std::string& where() const { return where_; }

  bool has_attr(const std::string& name) const;
  // Scalar attributes. An existing attribute of the same kind is overwritten in place; one of
  // another kind is replaced.
  void set_attr_string(const std::string& name, const std::string& value);
  void set_attr_int64(const std::string& name, int64_t value);
  void set_attr_int32(const std::string& name, int32_t value);
  void set_attr_double(const std::string& name, double value);
  void set_attr_bool(const std::string& name, bool value);
  // 1-D string array attribute (small lists such as phase names).
  void set_attr_strings(const std::string& name, const std::vector<std::string>& values);

  // Readers throw (naming where() and the attribute) when the attribute is missing or has
  // another kind. attr_int accepts any integer or enum type, attr_double any number.
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;
  bool attr_bool(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name) const;

  // Gives up the identifier without closing it, after a failed write: closing would flush the
  // library's caches again and could write part of what failed over a file whose last
  // successful flush is consistent. The object stays open in the library until the process
  // ends (cleanup_at_exit_disabled).
  void abandon() { id_.release(); }

 protected:
  Object() = default;
  Object(Id id, std::string where) : id_(std::move(id)), where_(std::move(where)) {}
  void set_scalar_attr(const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                       const char* kind);

  Id id_;
  std::string where_;
};

class Dataset : public Object {
 public:
  Dataset() = default;
  Dataset(Id id, std::string where, std::string file_path)
      : Object(std::move(id), std::move(where)), file_path_(std::move(file_path)) {}

  int rank() const;
  std::vector<hsize_t> dims() const;
  // Length along axis 0 (1 for a scalar dataset).
  int64_t rows() const;
  // Elements per row: product of dims()[1..].
  int64_t row_size() const;
  H5T_class_t type_class() const;
  // Size in bytes of the stored element type.
  size_t type_size() const;
  bool is_string() const { return type_class() == H5T_STRING; }
  // "int32", "uint8", "float64", "string", "compound", ... for error messages.
  std::string type_text() const;

  // Appends n_rows rows of elements of HDF5 memory type mem_type (any type HDF5 converts to the
  // stored one, e.g. bfloat16_type() bits for a bfloat16 dataset).
  void append_typed(hid_t mem_type, const void* data, int64_t n_rows) {
    append_raw(mem_type, data, n_rows);
  }

  // Appends n_rows rows (n_rows * row_size() values) at the end along axis 0.
  template <typename T>
  void append(const T* data, int64_t n_rows) {
    append_raw(TypeOf<T>::mem(), data, n_rows);
  }
  template <typename T>
  void append(const std::vector<T>& values) {
    int64_t per_row = row_size();
    append_raw(TypeOf<T>::mem(), values.data(),
               per_row == 0 ? 0 : static_cast<int64_t>(values.size()) / per_row);
  }
  // Overwrites rows [first, first + n_rows) (they must exist).
  template <typename T>
  void write(int64_t first, int64_t n_rows, const T* data) {
    write_raw(TypeOf<T>::mem(), first, n_rows, data);
  }
  // Reads rows [first, first + n_rows) into out (n_rows * row_size() values). Throws naming the
  // range when it is outside the dataset.
  template <typename T>
  void read(int64_t first, int64_t n_rows, T* out) const {
    read_raw(TypeOf<T>::mem(), first, n_rows, out);
  }
  template <typename T>
  std::vector<T> read(int64_t first, int64_t n_rows) const {
    std::vector<T> out(static_cast<size_t>(n_rows * row_size()));
    read_raw(TypeOf<T>::mem(), first, n_rows, out.data());
    return out;
  }
  template <typename T>
  std::vector<T> read_all() const {
    return read<T>(0, rows());
  }

  // String rows (1-D string datasets, variable or fixed length).
  void append_strings(const std::vector<std::string>& values);
  std::vector<std::string> read_strings(int64_t first, int64_t n_rows) const;
  // A scalar string dataset's value.
  std::string read_scalar_string() const;

  // Sets the length along axis 0 (grows or shrinks; shrinking discards rows).
  void resize_rows(int64_t n_rows);
  // A 1-D variable-length string dataset cut to its first `n_rows` rows with no trace of the
  // rows after them: the rows are read, every chunk is dropped (extent 0), and they are written
  // again into new chunks. resize_rows alone keeps the dropped rows' elements in their chunk, and
  // HDF5 frees the heap object an element refers to before it overwrites the element; after a
  // SIGKILL that element may refer to a global heap collection that never reached the file (or
  // lies past the end the superblock records), and the next append fails. The rewritten rows'
  // old heap objects stay in the file, unreferenced (a resume's cost: their bytes).
  void rewrite_string_rows(int64_t n_rows);

  // Bytes of one chunk of a chunked dataset as stored before compression (0 when contiguous):
  // what rewriting its last partial chunk may allocate in the file.
  uint64_t chunk_bytes() const;

 private:
  void append_raw(hid_t mem_type, const void* data, int64_t n_rows);
  void write_raw(hid_t mem_type, int64_t first, int64_t n_rows, const void* data);
  void read_raw(hid_t mem_type, int64_t first, int64_t n_rows, void* out) const;
  // File dataspace with rows [first, first + n_rows) selected, and the matching memory space.
  std::pair<Id, Id> select_rows(int64_t first, int64_t n_rows) const;

  std::string file_path_;
};

class Group : public Object {
 public:
  Group() = default;
  Group(Id id, std::string where, std::string file_path, std::string name)
      : Object(std::move(id), std::move(where)),
        file_path_(std::move(file_path)),
        name_(std::move(name)) {}

  // True when a link `name` (relative path allowed) exists in this group.
  bool has(const std::string& name) const;
  Group group(const std::string& name) const;
  Group create_group(const std::string& name);
  // Opens `name` or creates it when absent.
  Group require_group(const std::string& name);
  Dataset dataset(const std::string& name) const;

  // Path of this group inside the file ("/", "/baseline").
  const std::string& name() const { return name_; }
  const std::string& file_path() const { return file_path_; }

 protected:
  std::string child_path(const std::string& name) const;
  std::string file_path_;
  std::string name_;
};

// Compression of a row table's chunks. gzip is HDF5's own deflate; lz4 (filter 32004) is a
// plugin (Debian: hdf5-filter-plugin), which h5py uses too (or python3-hdf5plugin's copy).
enum class Codec { kGzip, kLz4 };

// Creation options of a row table (see create_rows).
struct RowsOptions {
  std::vector<hsize_t> row_shape;  // trailing dimensions; empty for a 1-D dataset
  hsize_t chunk_rows = 0;          // rows per chunk; 0 = about chunk_bytes per chunk
  size_t chunk_bytes = 64 * 1024;  // target chunk size when chunk_rows is 0
  bool compress = true;            // byte shuffle, then `codec`
  Codec codec = Codec::kGzip;
  int level = 4;  // gzip level 1..9
};

// Options with a given chunk length (rows) and row shape, compressed.
inline RowsOptions chunk_rows(hsize_t rows, std::vector<hsize_t> row_shape = {}) {
  RowsOptions o;
  o.chunk_rows = rows;
  o.row_shape = std::move(row_shape);
  return o;
}
// Options for rows of the given shape, chunk length chosen for ~64 KiB chunks, compressed.
inline RowsOptions row_shape(std::vector<hsize_t> shape) {
  RowsOptions o;
  o.row_shape = std::move(shape);
  return o;
}

// Creates an empty row table [0, row_shape...] of file_type, unlimited along axis 0, chunked
// (chunked layout is required for unlimited dimensions), shuffle before deflate when compress.
Dataset create_rows(Group& parent, const std::string& name, hid_t file_type,
                    const RowsOptions& options = {});
template <typename T>
Dataset create_rows(Group& parent, const std::string& name, const RowsOptions& options = {}) {
  return create_rows(parent, name, TypeOf<T>::file(), options);
}
// 1-D variable-length UTF-8 string row table.
Dataset create_string_rows(Group& parent, const std::string& name, const RowsOptions& options = {});

// One source of a virtual dataset: rows [0, rows) of dataset `path` in file `file` (a name
// relative to the virtual dataset's file, or absolute), placed at the next rows of the virtual
// dataset.
struct VirtualSource {
  std::string file;
  std::string path;
  hsize_t rows = 0;
};
// A virtual dataset [sum of rows, row_shape...] of file_type concatenating `sources` along axis 0
// (the file must use the 1.10 format: File::Format::kV110).
Dataset create_virtual_rows(Group& parent, const std::string& name, hid_t file_type,
                            const std::vector<hsize_t>& row_shape,
                            const std::vector<VirtualSource>& sources);

// Fixed-shape contiguous dataset holding `data` (product(dims) values; dims may contain 0).
template <typename T>
Dataset create_fixed(Group& parent, const std::string& name, const std::vector<hsize_t>& dims,
                     const T* data);
// Scalar variable-length UTF-8 string dataset (large text: docs/reference.md "HDF5" says datasets,
// not attributes, for items that may exceed 64 KiB).
Dataset create_string_scalar(Group& parent, const std::string& name, const std::string& value);

// Files ------------------------------------------------------------------------------------------

class File : public Group {
 public:
  enum class Access { kReadOnly, kReadWrite };
  enum class Format { kV18, kV110 };
  File() = default;

  // Creates `path`. Fails (naming the path) when it exists, unless truncate. The format is
  // pinned to HDF5 1.8 objects (H5Pset_libver_bounds V18..V18): readable by HDF5 >= 1.8, large
  // attributes allowed, and no 1.10 superblock status flags, so a file whose writer was killed
  // still opens in h5py without `h5clear -s`. kV110 (needed by virtual datasets) is for files
  // written at once and closed, never appended to by a job that may be killed.
  static File create(const std::string& path, bool truncate, Format format = Format::kV18);
  static File open(const std::string& path, Access access);

  // H5Fflush(H5F_SCOPE_GLOBAL): everything written so far reaches the OS.
  void flush();
  // Sets the end of allocated space that HDF5 keeps in the superblock (EOA) to at least the
  // file's size (H5Fincrement_filesize(file, 0)). A writer killed between writing metadata or
  // chunks and writing the superblock leaves bytes past the recorded EOA that its flushed
  // structures may point to; without this HDF5 refuses to load them ("len not positive after
  // adjustment for EOA") and would allocate new objects over them. Read-write files only.
  void cover_written_tail();
  // Makes sure that writing the next `bytes` bytes past the file's current end cannot fail for
  // lack of space: allocates them on the file system without changing the file's size
  // (fallocate with FALLOC_FL_KEEP_SIZE; HDF5 then writes into blocks it already owns). Where the
  // file system cannot allocate ahead (ZFS, some network file systems) it checks that at least
  // `bytes` are free instead (statvfs; a check, not a guarantee). Throws (exit code 1) naming
  // the file, `purpose`, the bytes asked and the bytes free when they are not available; the
  // file is not written. Blocks reserved and not used are freed when HDF5 truncates the file to
  // its allocated end (each flush) or when the file is closed (release_reserve).
  void reserve(uint64_t bytes, const std::string& purpose);
  // Frees what reserve() allocated past the file's end (ftruncate to its size). Errors ignored.
  void release_reserve();
  // Checked close (a failing final flush is reported); the destructor closes unchecked.
  void close();
  const std::string& path() const { return file_path_; }

 private:
  File(Id id, const std::string& path);
};

}  // namespace specrun::h5
