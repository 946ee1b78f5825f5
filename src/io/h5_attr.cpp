// HDF5 attributes of files, groups and datasets (h5::Object): written and read with their type
// checked, naming the object and the attribute on any failure.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/h5.h"
#include "io/h5_check.h"

namespace specrun::h5 {

// Object: attributes ------------------------------------------------------------------------------

bool Object::has_attr(const std::string& name) const {
  return H5C(H5Aexists(id(), name.c_str()),
             "cannot look up attribute '" << name << "' of " << where_) > 0;
}

void Object::set_scalar_attr(const std::string& name, hid_t file_type, hid_t mem_type,
                             const void* value, const char* kind) {
  if (has_attr(name)) {
    Id attr(H5C(H5Aopen(id(), name.c_str(), H5P_DEFAULT),
                "cannot open attribute '" << name << "' of " << where_));
    Id type(H5C(H5Aget_type(attr.get()), "H5Aget_type"));
    Id space(H5C(H5Aget_space(attr.get()), "H5Aget_space"));
    bool same =
        H5Tequal(type.get(), file_type) > 0 && H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
    if (same) {
      H5C(H5Awrite(attr.get(), mem_type, value),
          "cannot write " << kind << " attribute '" << name << "' of " << where_);
      return;
    }
    attr.reset();
    H5C(H5Adelete(id(), name.c_str()), "cannot replace attribute '" << name << "' of " << where_);
  }
  Id space(H5C(H5Screate(H5S_SCALAR), "H5Screate(H5S_SCALAR)"));
  Id attr(H5C(H5Acreate2(id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
              "cannot create " << kind << " attribute '" << name << "' of " << where_));
  H5C(H5Awrite(attr.get(), mem_type, value),
      "cannot write " << kind << " attribute '" << name << "' of " << where_);
}

void Object::set_attr_string(const std::string& name, const std::string& value) {
  Id type = string_type();
  const char* ptr = value.c_str();
  set_scalar_attr(name, type.get(), type.get(), &ptr, "string");
}

void Object::set_attr_int64(const std::string& name, int64_t value) {
  set_scalar_attr(name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, "int64");
}

void Object::set_attr_int32(const std::string& name, int32_t value) {
  set_scalar_attr(name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value, "int32");
}

void Object::set_attr_double(const std::string& name, double value) {
  set_scalar_attr(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, "float64");
}

void Object::set_attr_bool(const std::string& name, bool value) {
  Id type = bool_type();
  int8_t v = value ? 1 : 0;
  set_scalar_attr(name, type.get(), type.get(), &v, "bool");
}

void Object::set_attr_strings(const std::string& name, const std::vector<std::string>& values) {
  if (has_attr(name))
    H5C(H5Adelete(id(), name.c_str()), "cannot replace attribute '" << name << "' of " << where_);
  Id type = string_type();
  hsize_t n = values.size();
  Id space(H5C(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  Id attr(H5C(H5Acreate2(id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
              "cannot create string list attribute '" << name << "' of " << where_));
  std::vector<const char*> ptrs;
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  if (n > 0)
    H5C(H5Awrite(attr.get(), type.get(), ptrs.data()),
        "cannot write attribute '" << name << "' of " << where_);
}

namespace {

struct OpenAttr {
  Id attr, type, space;
  hssize_t points = 0;
};

OpenAttr open_attr(hid_t obj, const std::string& name, const std::string& where) {
  htri_t exists =
      H5C(H5Aexists(obj, name.c_str()), "cannot look up attribute '" << name << "' of " << where);
  SPEC_INPUT_CHECK(
      exists > 0, where << " has no attribute '" << name << "'; was this file written by specrun?");
  OpenAttr a;
  a.attr = Id(H5C(H5Aopen(obj, name.c_str(), H5P_DEFAULT),
                  "cannot open attribute '" << name << "' of " << where));
  a.type = Id(H5C(H5Aget_type(a.attr.get()), "H5Aget_type"));
  a.space = Id(H5C(H5Aget_space(a.attr.get()), "H5Aget_space"));
  a.points = H5Sget_simple_extent_npoints(a.space.get());
  return a;
}

}  // namespace

std::string Object::attr_string(const std::string& name) const {
  OpenAttr a = open_attr(id(), name, where_);
  SPEC_INPUT_CHECK(H5Tget_class(a.type.get()) == H5T_STRING && a.points == 1,
                   "attribute '" << name << "' of " << where_ << " is a "
                                 << class_text(a.type.get()) << " with " << a.points
                                 << " values, expected one string");
  return read_string_values(a.attr.get(), true, a.type.get(), H5S_ALL, H5S_ALL, 1, where_)[0];
}

std::vector<std::string> Object::attr_strings(const std::string& name) const {
  OpenAttr a = open_attr(id(), name, where_);
  SPEC_INPUT_CHECK(H5Tget_class(a.type.get()) == H5T_STRING,
                   "attribute '" << name << "' of " << where_ << " is a "
                                 << class_text(a.type.get()) << ", expected strings");
  return read_string_values(a.attr.get(), true, a.type.get(), H5S_ALL, H5S_ALL,
                            static_cast<size_t>(a.points), where_);
}

int64_t Object::attr_int(const std::string& name) const {
  OpenAttr a = open_attr(id(), name, where_);
  H5T_class_t cls = H5Tget_class(a.type.get());
  SPEC_INPUT_CHECK((cls == H5T_INTEGER || cls == H5T_ENUM) && a.points == 1,
                   "attribute '" << name << "' of " << where_ << " is a "
                                 << class_text(a.type.get()) << " with " << a.points
                                 << " values, expected one integer");
  if (cls == H5T_ENUM) {
    // Enums do not convert to integers; read the raw native value (booleans: 1 byte).
    Id native(H5C(H5Tget_native_type(a.type.get(), H5T_DIR_ASCEND), "H5Tget_native_type"));
    size_t size = H5Tget_size(native.get());
    SPEC_INPUT_CHECK(size <= 8, "enum attribute '" << name << "' of " << where_ << " too wide");
    unsigned char raw[8] = {0};
    H5C(H5Aread(a.attr.get(), native.get(), raw), "cannot read attribute '" << name << "'");
    if (size == 1) return static_cast<int8_t>(raw[0]);
    int64_t v = 0;
    std::memcpy(&v, raw, size);
    return v;
  }
  int64_t v = 0;
  H5C(H5Aread(a.attr.get(), H5T_NATIVE_INT64, &v),
      "cannot read attribute '" << name << "' of " << where_);
  return v;
}

double Object::attr_double(const std::string& name) const {
  OpenAttr a = open_attr(id(), name, where_);
  H5T_class_t cls = H5Tget_class(a.type.get());
  SPEC_INPUT_CHECK((cls == H5T_INTEGER || cls == H5T_FLOAT) && a.points == 1,
                   "attribute '" << name << "' of " << where_ << " is a "
                                 << class_text(a.type.get()) << ", expected one number");
  double v = 0;
  H5C(H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, &v),
      "cannot read attribute '" << name << "' of " << where_);
  return v;
}

bool Object::attr_bool(const std::string& name) const {
  return attr_int(name) != 0;
}

}  // namespace specrun::h5
