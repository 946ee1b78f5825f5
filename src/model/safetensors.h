// safetensors reader: memory-mapped, every offset and size checked against the file (a
// checkpoint is untrusted input). Format: u64 little-endian header length N, N bytes of JSON,
// then the data section. See docs/reference.md, "safetensors files".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"

namespace specrun {

// A read-only view of one tensor inside a mapped file. Valid while its file is open.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  // little-endian, row-major
  std::size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages

  std::int64_t numel() const;
  std::int64_t dim(int i) const { return shape.at(i); }
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the header: JSON object, known dtypes (F32/F16/BF16; others are
  // listed but rejected when accessed), offsets inside the data section, sizes equal to
  // prod(shape)*sizeof(dtype), no overlaps or holes. Throws naming the file and tensor.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // True for every tensor in the header, including those with an unsupported dtype.
  bool has(const std::string& name) const {
    return tensors_.count(name) != 0 || unsupported_dtype_.count(name) != 0;
  }
  // Throws (naming file and tensor) when absent, or when its dtype is not F32/F16/BF16.
  const TensorView& get(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted, all tensors in the header

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  // Tensors whose dtype is valid safetensors but not a float type we compute with (I32, F64,
  // ...): name -> dtype string. They are validated like the others; get() rejects them.
  std::map<std::string, std::string> unsupported_dtype_;
  // The "__metadata__" map (string -> string), empty when absent.
  std::map<std::string, std::string> metadata_;
  // The tensors of other dtypes (their view's dtype field is meaningless).
  std::map<std::string, TensorView> other_;

 public:
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A tensor of a non-float dtype (I64, BOOL, ... : EAGLE-3's d2t and t2d): its view (shape,
  // bytes) and its dtype name in `dtype`. Throws naming the file and tensor when absent, or
  // when its dtype is not `want`.
  const TensorView& get_other(const std::string& name, const std::string& want) const;
  // The safetensors dtype name of tensor `name` ("BF16", "I32", "F8_E4M3", ...). Throws naming
  // the file and tensor when absent.
  std::string dtype_of(const std::string& name) const;
};

// Writes tensors in safetensors format (used by make-model and import-llama2c). Tensors are
// written in the order given; the header is padded so that data starts 8-byte aligned. The file
// replaces an existing one at `path` through a temporary file and a rename (common/
// atomic_output.h: never through a link, never half-written); the commands decide beforehand
// whether an existing file may be replaced.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;  // already in dtype
  // A non-float tensor instead ("I64", "BOOL": EAGLE-3's d2t and t2d): its safetensors dtype
  // name and its element size; `dtype` is then ignored.
  std::string other_dtype = {};
  std::size_t other_size = 0;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace specrun
