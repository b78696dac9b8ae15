// The direct convolution steps' operand check, shared by braidpy._cuda (CUDA arrays)
// and braidpy._core's host twins (NumPy arrays): shapes in, kern::ConvDims out, or
// std::invalid_argument (pybind11's ValueError) naming the operand that does not fit.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "conv_direct.hpp"

namespace braidpy {

using Shape = std::vector<std::int64_t>;

inline std::string shape_text(const Shape& s) {
  std::string t = "(";
  for (std::size_t k = 0; k < s.size(); ++k) t += (k ? ", " : "") + std::to_string(s[k]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// U (m, N, C, H, W) and K (m, C, C, k, k) with k odd and at most kern::kConvMaxK.
inline kern::ConvDims conv_direct_dims(const char* where, const Shape& U, const Shape& K) {
  const std::string w(where);
  if (U.size() != 5) throw std::invalid_argument(w + ": U must be (m, N, C, H, W), got " +
                                                 shape_text(U));
  const std::int64_t m = U[0], C = U[2], k = K.size() == 5 ? K[3] : 0;
  if (K != Shape{m, C, C, k, k} || k % 2 == 0 || k > kern::kConvMaxK)
    throw std::invalid_argument(w + ": K must be (m, C, C, k, k) = (" + std::to_string(m) +
                                ", " + std::to_string(C) + ", " + std::to_string(C) +
                                ", k, k) with k odd and at most " +
                                std::to_string(kern::kConvMaxK) + ", got " + shape_text(K));
  if (U[1] * U[3] * U[4] >= (std::int64_t(1) << 31))
    throw std::invalid_argument(w + ": N * H * W must be below 2^31, got " + shape_text(U));
  return kern::ConvDims{m, U[1], C, U[3], U[4], k};
}

inline void conv_direct_expect(const char* where, const char* name, const Shape& got,
                               const Shape& want) {
  if (got != want)
    throw std::invalid_argument(std::string(where) + ": " + name + " must have shape " +
                                shape_text(want) + ", got " + shape_text(got));
}

// b (m, C) and h (m,) of a step.
inline void conv_direct_expect_step(const char* where, const kern::ConvDims& d, const Shape& b,
                                    const Shape& h) {
  conv_direct_expect(where, "b", b, Shape{d.m, d.C});
  conv_direct_expect(where, "h", h, Shape{d.m});
}

}  // namespace braidpy
