// Virtual datasets: one row table presented over row tables in other files (h5.h).
#include <string>
#include <vector>

#include "io/h5.h"
#include "io/h5_check.h"

namespace specrun::h5 {

Dataset create_virtual_rows(Group& parent, const std::string& name, hid_t file_type,
                            const std::vector<hsize_t>& row_shape,
                            const std::vector<VirtualSource>& sources) {
  std::string where =
      parent.file_path() + ":" + (parent.name() == "/" ? "/" + name : parent.name() + "/" + name);
  const int rank = 1 + static_cast<int>(row_shape.size());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  for (size_t i = 0; i < row_shape.size(); ++i) dims[i + 1] = row_shape[i];
  for (const VirtualSource& src : sources) dims[0] += src.rows;
  Id space(
      H5C(H5Screate_simple(rank, dims.data(), nullptr), "cannot make the dataspace of " << where));
  Id dcpl(H5C(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate(H5P_DATASET_CREATE)"));
  hsize_t at = 0;
  for (const VirtualSource& src : sources) {
    if (src.rows == 0) continue;
    std::vector<hsize_t> src_dims = dims, start(dims.size(), 0);
    src_dims[0] = src.rows;
    start[0] = at;
    Id src_space(H5C(H5Screate_simple(rank, src_dims.data(), nullptr), "H5Screate_simple"));
    H5C(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, src_dims.data(),
                            nullptr),
        "cannot select rows of " << where);
    H5C(H5Pset_virtual(dcpl.get(), space.get(), src.file.c_str(), src.path.c_str(),
                       src_space.get()),
        "cannot map " << src.file << ":" << src.path << " into " << where);
    at += src.rows;
  }
  H5C(H5Sselect_all(space.get()), "H5Sselect_all");
  Id d(H5C(H5Dcreate2(parent.id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT),
           "cannot create virtual dataset " << where));
  return Dataset(std::move(d), where, parent.file_path());
}

}  // namespace specrun::h5
