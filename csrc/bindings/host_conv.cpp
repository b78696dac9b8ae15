// braidpy._core._host_conv: the direct convolution steps (csrc/cuda/conv_direct.hpp) on
// NumPy arrays, on the host. The same element functions and reduction order as the
// GPU's kernels, with braidpy._cuda's argument names and checks, so that the
// "cuda-direct" conv backend's wiring and arithmetic run on a machine without a GPU.
#include "host_conv.hpp"

#include <pybind11/numpy.h>

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
  h.f64 = dt.is(py::dtype::of<double>());
  if (!h.f64 && !dt.is(py::dtype::of<float>()))
    throw py::type_error(std::string(where) + ": float64 or float32 arrays expected");
  for (const py::array& x : h.a)
    if (!x.dtype().is(dt)) throw py::value_error(std::string(where) + ": dtypes differ");
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

// Each mode takes the path the GPU takes for these dims: the tiled kernels' emulation
// (conv_tiled_host) or the element functions.
template <class T>
void step(Host& h, int act) {
  if (kern::conv_tiled(h.d, sizeof(T)))
    return kern::conv_tiled_host(kern::kConvStep, in<T>(h.a[0]), in<T>(h.a[1]), h.d,
                                 in<T>(h.a[0]), static_cast<const T*>(nullptr), in<T>(h.a[2]),
                                 in<T>(h.a[3]), act, out<T>(h.a[4]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_step_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), in<T>(h.a[3]), act, h.d,
                       out<T>(h.a[4]));
}

template <class T>
void g(Host& h, int act) {
  if (kern::conv_tiled(h.d, sizeof(T)))
    return kern::conv_tiled_host(kern::kConvG, in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                                 static_cast<const T*>(nullptr), in<T>(h.a[0]), in<T>(h.a[3]),
                                 in<T>(h.a[4]), act, out<T>(h.a[5]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_step_g_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), in<T>(h.a[3]),
                         in<T>(h.a[4]), act, h.d, out<T>(h.a[5]));
}

template <class T>
void transpose_add(Host& h) {
  if (kern::conv_tiled(h.d, sizeof(T)))
    return kern::conv_tiled_host(kern::kConvTransposeAdd, in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                                 static_cast<const T*>(nullptr), in<T>(h.a[0]),
                                 static_cast<const T*>(nullptr), static_cast<const T*>(nullptr),
                                 0, out<T>(h.a[3]));
  for (Index i = 0; i < h.d.size(); ++i)
    kern::conv_transpose_add_at(i, in<T>(h.a[0]), in<T>(h.a[1]), in<T>(h.a[2]), h.d,
                                out<T>(h.a[3]));
}

template <class T>
void param_grads(Host& h) {
  kern::conv_wgrad_host(in<T>(h.a[0]), in<T>(h.a[1]), h.d, out<T>(h.a[2]));
  kern::conv_bgrad_host(in<T>(h.a[0]), h.d, out<T>(h.a[3]));
}

}  // namespace

void bind_host_conv(py::module_& core) {
  py::module_ m = core.def_submodule(
      "_host_conv", "The direct convolution steps on NumPy arrays (the GPU kernels' host twins).");
  m.def("conv_direct_step", [](py::handle U, py::handle K, py::handle b, py::handle h,
                               py::handle o, int act) {
        const char* where = "conv_direct_step";
        check_act(where, act);
        Host x = host(where, {U, K, b, h, o}, 0, 1);
        conv_direct_expect_step(where, x.d, shape_of(x.a[2]), shape_of(x.a[3]));
        conv_direct_expect(where, "out", shape_of(x.a[4]), shape_of(x.a[0]));
        x.f64 ? step<double>(x, act) : step<float>(x, act);
      }, py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"));
  m.def("conv_direct_g", [](py::handle W, py::handle U, py::handle K, py::handle b,
                            py::handle h, py::handle G, int act) {
        const char* where = "conv_direct_g";
        check_act(where, act);
        Host x = host(where, {W, U, K, b, h, G}, 1, 2);
        conv_direct_expect(where, "W", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect_step(where, x.d, shape_of(x.a[3]), shape_of(x.a[4]));
        conv_direct_expect(where, "G", shape_of(x.a[5]), shape_of(x.a[1]));
        x.f64 ? g<double>(x, act) : g<float>(x, act);
      }, py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("G"),
      py::arg("act"));
  m.def("conv_direct_transpose_add", [](py::handle W, py::handle G, py::handle K,
                                        py::handle o) {
        const char* where = "conv_direct_transpose_add";
        Host x = host(where, {W, G, K, o}, 1, 2);
        conv_direct_expect(where, "W", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect(where, "out", shape_of(x.a[3]), shape_of(x.a[1]));
        x.f64 ? transpose_add<double>(x) : transpose_add<float>(x);
      }, py::arg("W"), py::arg("G"), py::arg("K"), py::arg("out"));
  m.def("conv_direct_param_grads", [](py::handle G, py::handle U, py::handle dK,
                                      py::handle db) {
        const char* where = "conv_direct_param_grads";
        Host x = host(where, {G, U, dK, db}, 1, 2);
        conv_direct_expect(where, "G", shape_of(x.a[0]), shape_of(x.a[1]));
        conv_direct_expect(where, "db", shape_of(x.a[3]), Shape{x.d.m, x.d.C});
        x.f64 ? param_grads<double>(x) : param_grads<float>(x);
      }, py::arg("G"), py::arg("U"), py::arg("dK"), py::arg("db"));
}

}  // namespace braidpy
