// braidpy._core._host_conv: the direct convolution steps (csrc/cuda/conv_direct.hpp) on
// NumPy arrays, on the host. The same element functions and reduction order as the
// GPU's kernels, with braidpy._cuda's argument names and checks, so that the
// "cuda-direct" conv backend's wiring and arithmetic run on a machine without a GPU.
#include "host_conv.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "same_dtype.hpp"

#include <string>

#include "../cuda/conv_direct_shapes.hpp"

namespace py = pybind11;

namespace braidpy {

namespace {

using kern::ConvDims;
using kern::Index;

Shape shape_of(const py::array& a) { return Shape(a.shape(), a.shape() + a.ndim()); }

// The arrays as C-contiguous buffers of one float dtype (out arrays writable).
struct Host {
  std::vector<py::array> a;
  ConvDims d;
  bool f64;
};

Host host(const char* where, std::initializer_list<py::handle> arrays, std::size_t iU,
          std::size_t iK) {
  Host h;
  for (py::handle x : arrays) {
    if (!py::isinstance<py::array>(x))
      throw py::type_error(std::string(where) + ": expected NumPy arrays");
    py::array arr = py::reinterpret_borrow<py::array>(x);
    if (!(arr.flags() & py::array::c_style) || !arr.writeable())
      throw py::value_error(std::string(where) + ": arrays must be C-contiguous and writable");
    h.a.push_back(arr);
  }
  const py::dtype dt = h.a[0].dtype();
  h.f64 = same_dtype(dt, py::dtype::of<double>());
  if (!h.f64 && !same_dtype(dt, py::dtype::of<float>()))
    throw py::type_error(std::string(where) + ": float64 or float32 arrays expected");
  for (const py::array& x : h.a)
    if (!same_dtype(x.dtype(), dt)) throw py::value_error(std::string(where) + ": dtypes differ");
  h.d = conv_direct_dims(where, shape_of(h.a[iU]), shape_of(h.a[iK]));
  return h;
}

template <class T>
const T* in(const py::array& a) {
  return static_cast<const T*>(a.data());
}
template <class T>
T* out(py::array& a) {
  return static_cast<T*>(a.mutable_data());
}

void check_act(const char* where, int act) {
  if (act != kern::kActTanh && act != kern::kActRelu && act != kern::kActSmoothRelu)
    throw py::value_error(std::string(where) +
                          ": act must be 1 (tanh), 2 (relu) or 3 (smooth_relu), got " +
                          std::to_string(act));
}

const char* const kFamilyNames[] = {"element", "tiled", "wide"};

// The kernel family a call runs: the GPU's pick for these dims (kernels "auto"), or the
// family named (so tests can compare the families' bits), if it can take these dims.
int family_of(const char* where, const std::string& kernels, const ConvDims& d,
              Index itemsize) {
  const std::string w(where);
  if (kernels == "auto") return kern::conv_family(d, itemsize);
  int f = -1;
  for (int k = 0; k < 3; ++k)
    if (kernels == kFamilyNames[k]) f = k;
  if (f < 0)
    throw py::value_error(w + ": kernels must be 'auto', 'element', 'tiled' or 'wide', got '" +
                          kernels + "'");
  const bool fits = f == kern::kConvElement ||
                    (f == kern::kConvTiled && kern::conv_tiled(d, itemsize)) ||
                    (f == kern::kConvWide && kern::conv_wide(d, itemsize));
  if (!fits)
    throw py::value_error(w + ": the '" + kernels + "' kernels cannot take C = " +
                          std::to_string(d.C) + ", k = " + std::to_string(d.k) + " in " +
                          std::to_string(itemsize) + "-byte floats");
  return f;
}

// A tiled or wide family's emulation, block by block (conv_tiled_host, conv_wide_host).
template <class T>
void blocked(int family, int mode, const T* X, const T* K, const ConvDims& d, const T* U,
             const T* Wa, const T* bias, const T* h, int act, T* o) {
  if (family == kern::kConvTiled) kern::conv_tiled_host(mode, X, K, d, U, Wa, bias, h, act, o);
  else kern::conv_wide_host(mode, X, K, d, U, Wa, bias, h, act, o);
}

// Each mode takes the family's path (family_of): the tiled or wide kernels' emulation, or
// the element functions.
template <class T>
void step(Host& h, int act, int family) {
  if (family != kern::kConvElement)
    return blocked(family, kern::kConvStep, in<T>(h.a[0]), in<T>(h.a[1]), h.d, in<T>(h.a[0]),
                   static_cast<const T*>(nullptr), in<T>(h.a[2]), in<T>(h.a[3]), act,
                   out<T>(h.a[4]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_step_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), in<T>(h.a[3]), act, h.d,
                       out<T>(h.a[4]));
}

template <class T>
void g(Host& h, int act, int family) {
  if (family != kern::kConvElement)
    return blocked(family, kern::kConvG, in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                   static_cast<const T*>(nullptr), in<T>(h.a[0]), in<T>(h.a[3]), in<T>(h.a[4]),
                   act, out<T>(h.a[5]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_step_g_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), in<T>(h.a[3]),
                         in<T>(h.a[4]), act, h.d, out<T>(h.a[5]));
}

template <class T>
void transpose_add(Host& h, int family) {
  if (family != kern::kConvElement)
    return blocked(family, kern::kConvTransposeAdd, in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                   static_cast<const T*>(nullptr), in<T>(h.a[0]), static_cast<const T*>(nullptr),
                   static_cast<const T*>(nullptr), 0, out<T>(h.a[3]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_transpose_add_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                                out<T>(h.a[3]));
}

const char* const kWgradNames[] = {"rows", "grouped"};

// The weight-gradient kernel a call runs: the GPU's pick (kernels "auto"), or the one named
// (both take any dims), so tests can compare their bits.
int wgrad_family_of(const char* where, const std::string& kernels, const ConvDims& d) {
  if (kernels == "auto") return kern::conv_wgrad_family(d);
  for (int k = 0; k < 2; ++k)
    if (kernels == kWgradNames[k]) return k;
  throw py::value_error(std::string(where) + ": kernels must be 'auto', 'rows' or 'grouped', "
                        "got '" + kernels + "'");
}

template <class T>
void param_grads(Host& h, int wgrad) {
  if (wgrad == kern::kWgradGrouped)
    kern::conv_wgrad_grouped_host(in<T>(h.a[0]), in<T>(h.a[1]), h.d, out<T>(h.a[2]));
  else kern::conv_wgrad_rows_host(in<T>(h.a[0]), in<T>(h.a[1]), h.d, out<T>(h.a[2]));
  kern::conv_bgrad_host(in<T>(h.a[0]), h.d, out<T>(h.a[3]));
}

}  // namespace

void bind_host_conv(py::module_& core) {
  py::module_ m = core.def_submodule(
      "_host_conv", "The direct convolution steps on NumPy arrays (the GPU kernels' host twins).");
  // kernels: "auto" (the GPU's pick), or "element", "tiled", "wide" (a host-only option).
  m.def("conv_direct_step", [](py::handle U, py::handle K, py::handle b, py::handle h,
                               py::handle o, int act, const std::string& kernels) {
        const char* where = "conv_direct_step";
        check_act(where, act);
        Host x = host(where, {U, K, b, h, o}, 0, 1);
        conv_direct_expect_step(where, x.d, shape_of(x.a[2]), shape_of(x.a[3]));
        conv_direct_expect(where, "out", shape_of(x.a[4]), shape_of(x.a[0]));
        const int f = family_of(where, kernels, x.d, x.f64 ? 8 : 4);
        x.f64 ? step<double>(x, act, f) : step<float>(x, act, f);
      }, py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"),
      py::arg("kernels") = "auto");
  m.def("conv_direct_g", [](py::handle W, py::handle U, py::handle K, py::handle b,
                            py::handle h, py::handle G, int act, const std::string& kernels) {
        const char* where = "conv_direct_g";
        check_act(where, act);
        Host x = host(where, {W, U, K, b, h, G}, 1, 2);
        conv_direct_expect(where, "W", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect_step(where, x.d, shape_of(x.a[3]), shape_of(x.a[4]));
        conv_direct_expect(where, "G", shape_of(x.a[5]), shape_of(x.a[1]));
        const int f = family_of(where, kernels, x.d, x.f64 ? 8 : 4);
        x.f64 ? g<double>(x, act, f) : g<float>(x, act, f);
      }, py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("G"),
      py::arg("act"), py::arg("kernels") = "auto");
  m.def("conv_direct_transpose_add", [](py::handle W, py::handle G, py::handle K,
                                        py::handle o, const std::string& kernels) {
        const char* where = "conv_direct_transpose_add";
        Host x = host(where, {W, G, K, o}, 1, 2);
        conv_direct_expect(where, "W", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect(where, "out", shape_of(x.a[3]), shape_of(x.a[1]));
        const int f = family_of(where, kernels, x.d, x.f64 ? 8 : 4);
        x.f64 ? transpose_add<double>(x, f) : transpose_add<float>(x, f);
      }, py::arg("W"), py::arg("G"), py::arg("K"), py::arg("out"), py::arg("kernels") = "auto");
  m.def("conv_direct_family", [](const Shape& U, const Shape& K, int itemsize) {
        const char* where = "conv_direct_family";
        if (itemsize != 4 && itemsize != 8)
          throw py::value_error(std::string(where) + ": itemsize must be 4 or 8, got " +
                                std::to_string(itemsize));
        return std::string(kFamilyNames[kern::conv_family(conv_direct_dims(where, U, K),
                                                          itemsize)]);
      }, py::arg("U_shape"), py::arg("K_shape"), py::arg("itemsize"),
      "The kernel family ('tiled', 'wide' or 'element') braidpy._cuda runs for states of "
      "shape U_shape (m, N, C, H, W) and kernels K_shape (m, C, C, k, k) of itemsize bytes.");
  m.def("conv_direct_wgrad_family", [](const Shape& U, const Shape& K) {
        return std::string(kWgradNames[kern::conv_wgrad_family(
            conv_direct_dims("conv_direct_wgrad_family", U, K))]);
      }, py::arg("U_shape"), py::arg("K_shape"),
      "The weight-gradient kernel ('rows' or 'grouped') braidpy._cuda runs for states of "
      "shape U_shape (m, N, C, H, W) and kernels K_shape (m, C, C, k, k), either dtype.");
  // kernels: "auto" (the GPU's pick of the weight-gradient kernel), "rows" or "grouped".
  m.def("conv_direct_param_grads", [](py::handle G, py::handle U, py::handle dK,
                                      py::handle db, const std::string& kernels) {
        const char* where = "conv_direct_param_grads";
        Host x = host(where, {G, U, dK, db}, 1, 2);
        conv_direct_expect(where, "G", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect(where, "db", shape_of(x.a[3]), Shape{x.d.m, x.d.C});
        const int f = wgrad_family_of(where, kernels, x.d);
        x.f64 ? param_grads<double>(x, f) : param_grads<float>(x, f);
      }, py::arg("G"), py::arg("U"), py::arg("dK"), py::arg("db"), py::arg("kernels") = "auto");
}

}  // namespace braidpy
