// The bindings' 1-D arrays: Addresses, the uint64 addresses and sizes they take from Python, and
// array_of, the one way they hand back an array they made.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace xferscope::bindings {

using Addresses = nanobind::ndarray<const std::uint64_t, nanobind::ndim<1>, nanobind::c_contig,
                                    nanobind::device::cpu>;

// A new 1-D NumPy array owning `values` (moved in, not copied).
template <typename T>
nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>> array_of(std::vector<T> values) {
  auto* owned = new std::vector<T>(std::move(values));
  nanobind::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>>(owned->data(), {owned->size()},
                                                                  owner);
}

}  // namespace xferscope::bindings
