// Internal to src/io: checking HDF5 calls (h5.cpp, h5_attr.cpp, h5_virtual.cpp).
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace specrun::h5 {

// Appended to every failed call's message: what HDF5 itself said, plus advice for the one
// failure users hit on cluster file systems.
std::string failure_detail();

// An HDF5 type in words (int32, float64, string, ...) for messages.
std::string class_text(hid_t type);

// Reads n strings from `obj` (a dataset or an attribute, chosen by is_attr) with the given file
// type, in either variable-length or fixed-length form.
std::vector<std::string> read_string_values(hid_t obj, bool is_attr, hid_t file_type,
                                            hid_t mem_space, hid_t file_space, size_t n,
                                            const std::string& where);

}  // namespace specrun::h5

// H5_CHECK plus HDF5's own words. Written out (not as a wrapper of H5_CHECK) so that the call
// is quoted as written, before its macros (H5P_DEFAULT, H5F_ACC_TRUNC) expand.
#define H5C_GEN(call, call_text, msg, code)                                                     \
  ([&]() {                                                                                      \
    auto spec_h5_rc_ = (call);                                                                  \
    SPEC_CHECK_GEN_(spec_h5_rc_ >= 0, call_text, msg << ::specrun::h5::failure_detail(), code); \
    return spec_h5_rc_;                                                                         \
  }())
#define H5C(call, msg) H5C_GEN(call, #call, msg, ::specrun::kExitFailure)
// Opening or creating a file the user named: a bad path is the user's input (exit code 2).
#define H5C_INPUT(call, msg) H5C_GEN(call, #call, msg, ::specrun::kExitUsage)
