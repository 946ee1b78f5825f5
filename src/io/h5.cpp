#include "io/h5.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "common/error.h"
#include "io/h5_check.h"

namespace specrun::h5 {

std::string failure_detail() {
  std::string text = error_stack_text();
  if (text.empty()) return "";
  std::string out = "\n  HDF5 says: " + text;
  if (text.find("unable to lock file") != std::string::npos)
    out +=
        "\n  advice: this file system may not support file locks (some NFS, Lustre, GPFS "
        "mounts), or another process has the file open; set HDF5_USE_FILE_LOCKING=FALSE in the "
        "job's environment if no other process writes the file";
  if (text.find("No space left on device") != std::string::npos ||
      text.find("Disk quota exceeded") != std::string::npos)
    out += "\n  advice: the file system is full (or the quota is used up): make room and run again";
  return out;
}

namespace {

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  std::string line;
  if (err->desc != nullptr && err->desc[0] != '\0') line = err->desc;
  if (err->func_name != nullptr) line = std::string(err->func_name) + "(): " + line;
  lines->push_back(line);
  return 0;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string class_text(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      return std::string(is_signed ? "int" : "uint") + std::to_string(H5Tget_size(type) * 8);
    }
    case H5T_FLOAT:
      return "float" + std::to_string(H5Tget_size(type) * 8);
    case H5T_STRING:
      return "string";
    case H5T_ENUM:
      return "enum";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "vlen";
    default:
      return "other";
  }
}

std::vector<std::string> read_string_values(hid_t obj, bool is_attr, hid_t file_type,
                                            hid_t mem_space, hid_t file_space, size_t n,
                                            const std::string& where) {
  std::vector<std::string> out(n);
  if (n == 0) return out;
  if (H5Tis_variable_str(file_type) > 0) {
    // HDF5 does not convert between ASCII and UTF-8 strings: read with the stored cset.
    Id mem_type = string_type();
    H5C(H5Tset_cset(mem_type.get(), H5Tget_cset(file_type)), "H5Tset_cset");
    std::vector<char*> ptrs(n, nullptr);
    if (is_attr)
      H5C(H5Aread(obj, mem_type.get(), ptrs.data()), "cannot read string attribute " << where);
    else
      H5C(H5Dread(obj, mem_type.get(), mem_space, file_space, H5P_DEFAULT, ptrs.data()),
          "cannot read strings from " << where);
    for (size_t i = 0; i < n; ++i)
      if (ptrs[i] != nullptr) out[i] = ptrs[i];
    Id space(H5Screate_simple(1, std::vector<hsize_t>{n}.data(), nullptr));
    H5Dvlen_reclaim(mem_type.get(), space.get(), H5P_DEFAULT, ptrs.data());
    return out;
  }
  size_t size = H5Tget_size(file_type);
  Id mem_type(H5C(H5Tcopy(H5T_C_S1), "H5Tcopy"));
  H5C(H5Tset_size(mem_type.get(), size), "H5Tset_size");
  H5C(H5Tset_strpad(mem_type.get(), H5T_STR_NULLPAD), "H5Tset_strpad");
  std::vector<char> buf(n * size, '\0');
  if (is_attr)
    H5C(H5Aread(obj, mem_type.get(), buf.data()), "cannot read string attribute " << where);
  else
    H5C(H5Dread(obj, mem_type.get(), mem_space, file_space, H5P_DEFAULT, buf.data()),
        "cannot read strings from " << where);
  for (size_t i = 0; i < n; ++i) {
    const char* s = buf.data() + i * size;
    out[i].assign(s, strnlen(s, size));
  }
  return out;
}

namespace {
// Before main: no HDF5 call runs earlier, so the library has not started yet.
const bool kCleanupAtExitDisabled = H5dont_atexit() >= 0;
}  // namespace

bool cleanup_at_exit_disabled() {
  return kCleanupAtExitDisabled;
}

void silence_error_printing() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string error_stack_text() {
  std::vector<std::string> lines;
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &lines) < 0) return "";
  std::string text;
  // The innermost entries say what went wrong; the outer ones repeat "unable to ...".
  for (size_t i = 0; i < lines.size() && i < 2; ++i) {
    if (!text.empty()) text += "; ";
    text += lines[i];
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// Id ---------------------------------------------------------------------------------------------

Id& Id::operator=(Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Id::reset() {
  if (id_ >= 0) H5Idec_ref(id_);
  id_ = H5I_INVALID_HID;
}

hid_t Id::release() {
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id;
}

Id string_type() {
  Id type(H5C(H5Tcopy(H5T_C_S1), "H5Tcopy(H5T_C_S1)"));
  H5C(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size(H5T_VARIABLE)");
  H5C(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset(UTF8)");
  return type;
}

namespace {

// A 16-bit little-endian float: fields as H5Tset_fields (sign, exponent, mantissa positions).
Id float16_with(size_t exponent_bits, size_t mantissa_bits, size_t bias) {
  Id type(H5C(H5Tcopy(H5T_IEEE_F32LE), "H5Tcopy(H5T_IEEE_F32LE)"));
  H5C(H5Tset_fields(type.get(), 15, mantissa_bits, exponent_bits, 0, mantissa_bits),
      "H5Tset_fields");
  H5C(H5Tset_size(type.get(), 2), "H5Tset_size(2)");
  H5C(H5Tset_ebias(type.get(), bias), "H5Tset_ebias");
  return type;
}

}  // namespace

Id bfloat16_type() {
  return float16_with(8, 7, 127);
}

Id float16_type() {
  return float16_with(5, 10, 15);
}

Id bool_type() {
  Id type(H5C(H5Tenum_create(H5T_NATIVE_INT8), "H5Tenum_create"));
  int8_t v = 0;
  H5C(H5Tenum_insert(type.get(), "FALSE", &v), "H5Tenum_insert(FALSE)");
  v = 1;
  H5C(H5Tenum_insert(type.get(), "TRUE", &v), "H5Tenum_insert(TRUE)");
  return type;
}

// Dataset ----------------------------------------------------------------------------------------

int Dataset::rank() const {
  Id space(H5C(H5Dget_space(id()), "cannot get the dataspace of " << where_));
  return H5C(H5Sget_simple_extent_ndims(space.get()), "cannot get the rank of " << where_);
}

std::vector<hsize_t> Dataset::dims() const {
  Id space(H5C(H5Dget_space(id()), "cannot get the dataspace of " << where_));
  int rank = H5C(H5Sget_simple_extent_ndims(space.get()), "cannot get the rank of " << where_);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0)
    H5C(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr),
        "cannot get the shape of " << where_);
  return dims;
}

uint64_t Dataset::chunk_bytes() const {
  Id plist(H5C(H5Dget_create_plist(id()), "cannot get the creation properties of " << where_));
  if (H5Pget_layout(plist.get()) != H5D_CHUNKED) return 0;
  std::vector<hsize_t> chunk(static_cast<size_t>(std::max(rank(), 1)), 0);
  const int n = H5C(H5Pget_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data()),
                    "cannot get the chunk shape of " << where_);
  uint64_t bytes = type_size();
  for (int i = 0; i < n; ++i) bytes *= chunk[static_cast<size_t>(i)];
  return bytes;
}

int64_t Dataset::rows() const {
  std::vector<hsize_t> d = dims();
  return d.empty() ? 1 : static_cast<int64_t>(d[0]);
}

int64_t Dataset::row_size() const {
  std::vector<hsize_t> d = dims();
  int64_t n = 1;
  for (size_t i = 1; i < d.size(); ++i) n *= static_cast<int64_t>(d[i]);
  return n;
}

H5T_class_t Dataset::type_class() const {
  Id type(H5C(H5Dget_type(id()), "cannot get the type of " << where_));
  return H5Tget_class(type.get());
}

size_t Dataset::type_size() const {
  Id type(H5C(H5Dget_type(id()), "cannot get the type of " << where_));
  return H5Tget_size(type.get());
}

std::string Dataset::type_text() const {
  Id type(H5C(H5Dget_type(id()), "cannot get the type of " << where_));
  return class_text(type.get());
}

std::pair<Id, Id> Dataset::select_rows(int64_t first, int64_t n_rows) const {
  Id file_space(H5C(H5Dget_space(id()), "cannot get the dataspace of " << where_));
  int rank = H5C(H5Sget_simple_extent_ndims(file_space.get()), "H5Sget_simple_extent_ndims");
  SPEC_CHECK(rank >= 1, where_ << " is a scalar; expected rows");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5C(H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr),
      "H5Sget_simple_extent_dims");
  SPEC_INPUT_CHECK(first >= 0 && n_rows >= 0 && first + n_rows <= static_cast<int64_t>(dims[0]),
                   "rows [" << first << ", " << first + n_rows << ") are outside " << where_
                            << ", which has " << dims[0] << " rows");
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(first);
  count[0] = static_cast<hsize_t>(n_rows);
  H5C(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                          nullptr),
      "cannot select rows [" << first << ", " << first + n_rows << ") of " << where_);
  Id mem_space(H5C(H5Screate_simple(rank, count.data(), nullptr), "H5Screate_simple"));
  return {std::move(file_space), std::move(mem_space)};
}

void Dataset::append_raw(hid_t mem_type, const void* data, int64_t n_rows) {
  if (n_rows == 0) return;
  std::vector<hsize_t> d = dims();
  SPEC_CHECK(!d.empty(), where_ << " is a scalar; cannot append rows");
  int64_t first = static_cast<int64_t>(d[0]);
  d[0] += static_cast<hsize_t>(n_rows);
  H5C(H5Dset_extent(id(), d.data()),
      "cannot extend " << where_ << " to " << d[0] << " rows (is it a row table?)");
  for (size_t i = 1; i < d.size(); ++i)
    if (d[i] == 0) return;  // zero-width rows hold no values
  write_raw(mem_type, first, n_rows, data);
}

void Dataset::write_raw(hid_t mem_type, int64_t first, int64_t n_rows, const void* data) {
  if (n_rows == 0) return;
  const auto spaces = select_rows(first, n_rows);  // no structured binding: H5C is a lambda
  const Id& file_space = spaces.first;
  const Id& mem_space = spaces.second;
  H5C(H5Dwrite(id(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
      "cannot write rows [" << first << ", " << first + n_rows << ") of " << where_);
}

void Dataset::read_raw(hid_t mem_type, int64_t first, int64_t n_rows, void* out) const {
  if (n_rows == 0) {
    select_rows(first, 0);  // still validates the range
    return;
  }
  const auto spaces = select_rows(first, n_rows);
  const Id& file_space = spaces.first;
  const Id& mem_space = spaces.second;
  H5C(H5Dread(id(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, out),
      "cannot read rows [" << first << ", " << first + n_rows << ") of " << where_);
}

void Dataset::append_strings(const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  Id type = string_type();
  append_raw(type.get(), ptrs.data(), static_cast<int64_t>(values.size()));
}

std::vector<std::string> Dataset::read_strings(int64_t first, int64_t n_rows) const {
  Id type(H5C(H5Dget_type(id()), "cannot get the type of " << where_));
  SPEC_INPUT_CHECK(H5Tget_class(type.get()) == H5T_STRING,
                   where_ << " holds " << class_text(type.get()) << " values, expected strings");
  if (n_rows == 0) {
    select_rows(first, 0);
    return {};
  }
  auto [file_space, mem_space] = select_rows(first, n_rows);
  return read_string_values(id(), false, type.get(), mem_space.get(), file_space.get(),
                            static_cast<size_t>(n_rows), where_);
}

std::string Dataset::read_scalar_string() const {
  Id type(H5C(H5Dget_type(id()), "cannot get the type of " << where_));
  SPEC_INPUT_CHECK(H5Tget_class(type.get()) == H5T_STRING && rank() == 0,
                   where_ << " is not a scalar string");
  return read_string_values(id(), false, type.get(), H5S_ALL, H5S_ALL, 1, where_)[0];
}

void Dataset::resize_rows(int64_t n_rows) {
  std::vector<hsize_t> d = dims();
  SPEC_CHECK(!d.empty() && n_rows >= 0, "cannot resize " << where_ << " to " << n_rows);
  d[0] = static_cast<hsize_t>(n_rows);
  H5C(H5Dset_extent(id(), d.data()), "cannot resize " << where_ << " to " << n_rows << " rows");
}

void Dataset::rewrite_string_rows(int64_t n_rows) {
  SPEC_CHECK(rank() == 1 && is_string(), where_ << " is not a 1-D string dataset");
  SPEC_CHECK(n_rows >= 0 && n_rows <= rows(),
             "cannot cut " << where_ << " to " << n_rows << " rows: it has " << rows());
  const std::vector<std::string> kept = read_strings(0, n_rows);
  resize_rows(0);
  append_strings(kept);
}

// Group ------------------------------------------------------------------------------------------

std::string Group::child_path(const std::string& name) const {
  std::string inner = name_ == "/" ? "/" + name : name_ + "/" + name;
  return inner;
}

bool Group::has(const std::string& name) const {
  // H5Lexists fails on a missing intermediate group; check each component.
  std::string prefix;
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t next = name.find('/', pos);
    if (next == std::string::npos) next = name.size();
    prefix += (prefix.empty() ? "" : "/") + name.substr(pos, next - pos);
    if (H5C(H5Lexists(id(), prefix.c_str(), H5P_DEFAULT),
            "cannot look up '" << prefix << "' in " << where_) <= 0)
      return false;
    pos = next + 1;
  }
  return true;
}

Group Group::group(const std::string& name) const {
  std::string path = child_path(name);
  SPEC_INPUT_CHECK(has(name), file_path_ << ": group " << path << " is missing");
  Id g(H5C(H5Gopen2(id(), name.c_str(), H5P_DEFAULT),
           "cannot open group " << path << " in " << file_path_));
  return Group(std::move(g), file_path_ + ":" + path, file_path_, path);
}

Group Group::create_group(const std::string& name) {
  std::string path = child_path(name);
  Id g(H5C(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           "cannot create group " << path << " in " << file_path_));
  return Group(std::move(g), file_path_ + ":" + path, file_path_, path);
}

Group Group::require_group(const std::string& name) {
  return has(name) ? group(name) : create_group(name);
}

Dataset Group::dataset(const std::string& name) const {
  std::string path = child_path(name);
  SPEC_INPUT_CHECK(has(name), file_path_ << ": dataset " << path << " is missing");
  Id d(H5C(H5Dopen2(id(), name.c_str(), H5P_DEFAULT),
           "cannot open dataset " << path << " in " << file_path_ << " (is it a dataset?)"));
  return Dataset(std::move(d), file_path_ + ":" + path, file_path_);
}

// Creation ---------------------------------------------------------------------------------------

Dataset create_rows(Group& parent, const std::string& name, hid_t file_type,
                    const RowsOptions& options) {
  std::string where =
      parent.file_path() + ":" + (parent.name() == "/" ? "/" + name : parent.name() + "/" + name);
  int rank = 1 + static_cast<int>(options.row_shape.size());
  std::vector<hsize_t> dims(static_cast<size_t>(rank), 0), max_dims(dims.size()),
      chunk(dims.size());
  max_dims[0] = H5S_UNLIMITED;
  size_t row_elems = 1;
  for (size_t i = 0; i < options.row_shape.size(); ++i) {
    dims[i + 1] = options.row_shape[i];
    // A zero-width fixed dimension cannot hold a chunk of width 1; leave it unlimited.
    max_dims[i + 1] = options.row_shape[i] == 0 ? H5S_UNLIMITED : options.row_shape[i];
    chunk[i + 1] = std::max<hsize_t>(options.row_shape[i], 1);
    row_elems *= std::max<hsize_t>(options.row_shape[i], 1);
  }
  size_t row_bytes = std::max<size_t>(1, H5Tget_size(file_type) * row_elems);
  chunk[0] = options.chunk_rows > 0 ? options.chunk_rows
                                    : std::max<hsize_t>(1, options.chunk_bytes / row_bytes);
  Id space(H5C(H5Screate_simple(rank, dims.data(), max_dims.data()),
               "cannot make the dataspace of " << where));
  Id dcpl(H5C(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate(H5P_DATASET_CREATE)"));
  H5C(H5Pset_chunk(dcpl.get(), rank, chunk.data()), "cannot set the chunk shape of " << where);
  if (options.compress) {
    // Filters run in the order added: shuffle first so the codec sees grouped bytes.
    H5C(H5Pset_shuffle(dcpl.get()), "cannot add the shuffle filter to " << where);
    if (options.codec == Codec::kGzip) {
      H5C(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.level)),
          "cannot add the deflate filter to " << where);
    } else {
      constexpr H5Z_filter_t kLz4 = 32004;
      SPEC_INPUT_CHECK(H5Zfilter_avail(kLz4) > 0,
                       where << ": the HDF5 lz4 filter plugin is not installed (Debian: "
                                "hdf5-filter-plugin; or set HDF5_PLUGIN_PATH), or use gzip");
      H5C(H5Pset_filter(dcpl.get(), kLz4, H5Z_FLAG_MANDATORY, 0, nullptr),
          "cannot add the lz4 filter to " << where);
    }
  }
  Id d(H5C(H5Dcreate2(parent.id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT),
           "cannot create dataset " << where));
  return Dataset(std::move(d), where, parent.file_path());
}

Dataset create_string_rows(Group& parent, const std::string& name, const RowsOptions& options) {
  Id type = string_type();
  RowsOptions o = options;
  if (o.chunk_rows == 0) o.chunk_rows = 1024;  // heap references, 16 bytes each in the file
  return create_rows(parent, name, type.get(), o);
}

template <typename T>
Dataset create_fixed(Group& parent, const std::string& name, const std::vector<hsize_t>& dims,
                     const T* data) {
  std::string where =
      parent.file_path() + ":" + (parent.name() == "/" ? "/" + name : parent.name() + "/" + name);
  Id space(dims.empty() ? H5C(H5Screate(H5S_SCALAR), "H5Screate")
                        : H5C(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                              "cannot make the dataspace of " << where));
  Id d(H5C(H5Dcreate2(parent.id(), name.c_str(), TypeOf<T>::file(), space.get(), H5P_DEFAULT,
                      H5P_DEFAULT, H5P_DEFAULT),
           "cannot create dataset " << where));
  hsize_t n = 1;
  for (hsize_t v : dims) n *= v;
  if (n > 0)
    H5C(H5Dwrite(d.get(), TypeOf<T>::mem(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
        "cannot write " << where);
  return Dataset(std::move(d), where, parent.file_path());
}

template Dataset create_fixed<int32_t>(Group&, const std::string&, const std::vector<hsize_t>&,
                                       const int32_t*);
template Dataset create_fixed<int64_t>(Group&, const std::string&, const std::vector<hsize_t>&,
                                       const int64_t*);
template Dataset create_fixed<float>(Group&, const std::string&, const std::vector<hsize_t>&,
                                     const float*);
template Dataset create_fixed<double>(Group&, const std::string&, const std::vector<hsize_t>&,
                                      const double*);

Dataset create_string_scalar(Group& parent, const std::string& name, const std::string& value) {
  std::string where =
      parent.file_path() + ":" + (parent.name() == "/" ? "/" + name : parent.name() + "/" + name);
  Id type = string_type();
  Id space(H5C(H5Screate(H5S_SCALAR), "H5Screate"));
  Id d(H5C(H5Dcreate2(parent.id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           "cannot create dataset " << where));
  const char* ptr = value.c_str();
  H5C(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &ptr), "cannot write " << where);
  return Dataset(std::move(d), where, parent.file_path());
}

// File -------------------------------------------------------------------------------------------

File::File(Id id, const std::string& path) : Group(std::move(id), path + ":/", path, "/") {}

File File::create(const std::string& path, bool truncate, Format format) {
  silence_error_printing();
  SPEC_INPUT_CHECK(truncate || !file_exists(path),
                   path << " already exists; refusing to overwrite it");
  Id fapl(H5C(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate(H5P_FILE_ACCESS)"));
  if (format == Format::kV18)
    H5C(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
        "H5Pset_libver_bounds(V18, V18)");
  else
    H5C(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110),
        "H5Pset_libver_bounds(V110, V110)");
  const unsigned flags = truncate ? H5F_ACC_TRUNC : H5F_ACC_EXCL;
  const bool existed = file_exists(path);
  Id f(H5Fcreate(path.c_str(), flags, H5P_DEFAULT, fapl.get()));
  if (!f.valid()) {
    const std::string detail = failure_detail();
    // What the failed create left (an empty or partial file) goes, unless it was there before.
    if (!existed) std::remove(path.c_str());
    if (detail.find("the file system is full") != std::string::npos)
      SPEC_FAIL("disk full: cannot create HDF5 file " << path << detail);
    SPEC_INPUT_FAIL("cannot create HDF5 file "
                    << path << " (does the directory exist and is it writable?)" << detail);
  }
  return File(std::move(f), path);
}

File File::open(const std::string& path, Access access) {
  silence_error_printing();
  SPEC_INPUT_CHECK(file_exists(path), path << ": no such file");
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  SPEC_INPUT_CHECK(is_hdf5 > 0,
                   path << " is not an HDF5 file (or cannot be read)" << failure_detail());
  Id fapl(H5C(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate(H5P_FILE_ACCESS)"));
  if (access == Access::kReadWrite)
    H5C(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
        "H5Pset_libver_bounds(V18, V18)");
  const unsigned flags = access == Access::kReadOnly ? H5F_ACC_RDONLY : H5F_ACC_RDWR;
  Id f(H5C_INPUT(H5Fopen(path.c_str(), flags, fapl.get()),
                 "cannot open HDF5 file "
                     << path << (access == Access::kReadOnly ? " for reading" : " for writing")));
  return File(std::move(f), path);
}

void File::flush() {
  H5C(H5Fflush(id(), H5F_SCOPE_GLOBAL), "cannot flush " << file_path_ << " (disk full?)");
}

void File::cover_written_tail() {
  H5C(H5Fincrement_filesize(id(), 0),
      "cannot set the allocated end of " << file_path_ << " to its size");
}

namespace {

// The file descriptor of a file opened with the default (sec2) driver; -1 for other drivers.
int sec2_descriptor(hid_t file) {
  Id fapl(H5Fget_access_plist(file));
  if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2) return -1;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) return -1;
  return *static_cast<int*>(handle);
}

std::string mib_text(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

void File::reserve(uint64_t bytes, const std::string& purpose) {
  const int fd = sec2_descriptor(id());
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0) {
    const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, st.st_size, static_cast<off_t>(bytes));
    if (rc == 0) return;
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT) {
      struct statvfs vfs {};
      const uint64_t free_bytes =
          ::fstatvfs(fd, &vfs) == 0 ? static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize : 0;
      SPEC_FAIL("disk full: cannot write "
                << purpose << " to " << file_path_ << ": it needs up to " << mib_text(bytes)
                << " of free space, " << mib_text(free_bytes) << " are free on its file system ("
                << std::strerror(err) << "); nothing of it was written");
    }
    if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
      SPEC_FAIL("cannot reserve " << mib_text(bytes) << " for " << purpose << " in " << file_path_
                                  << ": " << std::strerror(err));
  }
  // No allocation ahead on this file system: check the free space instead.
  std::string dir = std::filesystem::path(file_path_).parent_path().string();
  if (dir.empty()) dir = ".";
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  SPEC_CHECK(free_bytes >= bytes, "disk full: cannot write "
                                      << purpose << " to " << file_path_ << ": it needs up to "
                                      << mib_text(bytes) << " of free space, "
                                      << mib_text(free_bytes)
                                      << " are free on its file system; nothing of it was "
                                         "written");
}

void File::release_reserve() {
  const int fd = valid() ? sec2_descriptor(id()) : -1;
  struct stat st {};
  // Truncating to the same size frees blocks allocated past the end (ext4, xfs, tmpfs).
  if (fd >= 0 && ::fstat(fd, &st) == 0) (void)!::ftruncate(fd, st.st_size);
}

void File::close() {
  if (!id_.valid()) return;
  hid_t f = id_.release();
  H5C(H5Fclose(f), "cannot close " << file_path_ << " (disk full?)");
}

}  // namespace specrun::h5
