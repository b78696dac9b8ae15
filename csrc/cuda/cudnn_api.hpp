// braidpy's own declarations of the part of cuDNN's legacy C API it calls, so
// that nothing of cuDNN is needed to build braidpy: opaque handle and descriptor
// types, the enum values used, the algorithm-performance records, and every
// function as a pointer type resolved with dlopen/dlsym at first use
// (cudnn_loader.cpp). Written from NVIDIA's public API documentation, "cuDNN API
// Reference", version 9 (cudnn_ops, cudnn_cnn and cudnn_graph libraries: the
// legacy convolution API, deprecated but shipped in cuDNN 9 and cuDNN's only
// float64 convolution route). The values below are interface facts of that
// documented ABI; a cuDNN whose functions are missing is refused at load.
#pragma once

#include <cstddef>

namespace braidpy {
namespace cudnn {

// Opaque pointers (cudnnHandle_t, cudnnTensorDescriptor_t, ...), and cudaStream_t.
struct HandleObj;
struct TensorObj;
struct FilterObj;
struct ConvObj;
using Handle = HandleObj*;
using TensorDesc = TensorObj*;
using FilterDesc = FilterObj*;
using ConvDesc = ConvObj*;
using Stream = void*;

// cudnnStatus_t: 0 is CUDNN_STATUS_SUCCESS; other codes are read through
// cudnnGetErrorString.
using Status = int;
constexpr Status kSuccess = 0;

// cudnnDataType_t
constexpr int kDataFloat = 0;
constexpr int kDataDouble = 1;
// cudnnTensorFormat_t
constexpr int kFormatNCHW = 0;
// cudnnConvolutionMode_t: braidpy's conv2d is a cross-correlation.
constexpr int kCrossCorrelation = 1;
// cudnnMathType_t: the default, tensor cores permitted (float32: TF32 rounding of the
// inputs), FMA only (no TF32 tensor-core rounding of float32 inputs).
constexpr int kDefaultMath = 0;
constexpr int kTensorOpMath = 1;
constexpr int kFmaMath = 3;
// cudnnDeterminism_t
constexpr int kDeterministic = 1;
// Algorithms pinned when the heuristics offer no deterministic one:
// CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, _BWD_DATA_ALGO_1, _BWD_FILTER_ALGO_1
// (all deterministic and defined for float64 NCHW).
constexpr int kFwdImplicitGemm = 0;
constexpr int kBwdDataAlgo1 = 1;
constexpr int kBwdFilterAlgo1 = 1;
// Upper bounds of the algorithm enums (CUDNN_CONVOLUTION_*_ALGO_COUNT).
constexpr int kFwdAlgoCount = 8;
constexpr int kBwdDataAlgoCount = 6;
constexpr int kBwdFilterAlgoCount = 7;

// cudnnConvolutionFwdAlgoPerf_t, ...BwdDataAlgoPerf_t, ...BwdFilterAlgoPerf_t:
// one record layout, the algorithm enum first.
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  std::size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

// The functions, by their documented signatures.
struct Api {
  std::size_t (*GetVersion)();
  const char* (*GetErrorString)(Status);
  Status (*Create)(Handle*);
  Status (*Destroy)(Handle);
  Status (*SetStream)(Handle, Stream);

  Status (*CreateTensorDescriptor)(TensorDesc*);
  Status (*DestroyTensorDescriptor)(TensorDesc);
  Status (*SetTensor4dDescriptorEx)(TensorDesc, int dtype, int n, int c, int h, int w,
                                    int ns, int cs, int hs, int ws);
  Status (*GetTensor4dDescriptor)(TensorDesc, int* dtype, int* n, int* c, int* h, int* w,
                                  int* ns, int* cs, int* hs, int* ws);

  Status (*CreateFilterDescriptor)(FilterDesc*);
  Status (*DestroyFilterDescriptor)(FilterDesc);
  Status (*SetFilter4dDescriptor)(FilterDesc, int dtype, int format, int k, int c, int h,
                                  int w);
  Status (*GetFilter4dDescriptor)(FilterDesc, int* dtype, int* format, int* k, int* c, int* h,
                                  int* w);

  Status (*CreateConvolutionDescriptor)(ConvDesc*);
  Status (*DestroyConvolutionDescriptor)(ConvDesc);
  Status (*SetConvolution2dDescriptor)(ConvDesc, int pad_h, int pad_w, int u, int v,
                                       int dil_h, int dil_w, int mode, int compute_type);
  Status (*GetConvolution2dDescriptor)(ConvDesc, int* pad_h, int* pad_w, int* u, int* v,
                                       int* dil_h, int* dil_w, int* mode, int* compute_type);
  Status (*SetConvolutionGroupCount)(ConvDesc, int groups);
  Status (*GetConvolutionGroupCount)(ConvDesc, int* groups);
  Status (*SetConvolutionMathType)(ConvDesc, int math_type);
  Status (*GetConvolution2dForwardOutputDim)(ConvDesc, TensorDesc, FilterDesc, int* n, int* c,
                                             int* h, int* w);
  Status (*GetConvolutionNdForwardOutputDim)(ConvDesc, TensorDesc, FilterDesc, int nb_dims,
                                             int* dims);

  Status (*GetConvolutionForwardAlgorithm_v7)(Handle, TensorDesc x, FilterDesc w, ConvDesc,
                                              TensorDesc y, int requested, int* returned,
                                              AlgoPerf* results);
  Status (*GetConvolutionForwardWorkspaceSize)(Handle, TensorDesc x, FilterDesc w, ConvDesc,
                                               TensorDesc y, int algo, std::size_t* bytes);
  Status (*ConvolutionForward)(Handle, const void* alpha, TensorDesc x, const void* x_data,
                               FilterDesc w, const void* w_data, ConvDesc, int algo,
                               void* workspace, std::size_t workspace_bytes, const void* beta,
                               TensorDesc y, void* y_data);

  Status (*GetConvolutionBackwardDataAlgorithm_v7)(Handle, FilterDesc w, TensorDesc dy,
                                                   ConvDesc, TensorDesc dx, int requested,
                                                   int* returned, AlgoPerf* results);
  Status (*GetConvolutionBackwardDataWorkspaceSize)(Handle, FilterDesc w, TensorDesc dy,
                                                    ConvDesc, TensorDesc dx, int algo,
                                                    std::size_t* bytes);
  Status (*ConvolutionBackwardData)(Handle, const void* alpha, FilterDesc w, const void* w_data,
                                    TensorDesc dy, const void* dy_data, ConvDesc, int algo,
                                    void* workspace, std::size_t workspace_bytes,
                                    const void* beta, TensorDesc dx, void* dx_data);

  Status (*GetConvolutionBackwardFilterAlgorithm_v7)(Handle, TensorDesc x, TensorDesc dy,
                                                     ConvDesc, FilterDesc dw, int requested,
                                                     int* returned, AlgoPerf* results);
  Status (*GetConvolutionBackwardFilterWorkspaceSize)(Handle, TensorDesc x, TensorDesc dy,
                                                      ConvDesc, FilterDesc dw, int algo,
                                                      std::size_t* bytes);
  Status (*ConvolutionBackwardFilter)(Handle, const void* alpha, TensorDesc x,
                                      const void* x_data, TensorDesc dy, const void* dy_data,
                                      ConvDesc, int algo, void* workspace,
                                      std::size_t workspace_bytes, const void* beta,
                                      FilterDesc dw, void* dw_data);

  Status (*ConvolutionBackwardBias)(Handle, const void* alpha, TensorDesc dy,
                                    const void* dy_data, const void* beta, TensorDesc db,
                                    void* db_data);

  // Optional: nullptr where the library lacks them (cudnn_loader.cpp does not refuse it);
  // only the measured choice of algorithms (BRAIDPY_CUDNN_BENCHMARK=1) calls them. They
  // run every algorithm on the caller's buffers (the outputs y, dx, dw are overwritten)
  // with the caller's workspace, and return the records sorted by time.
  Status (*FindConvolutionForwardAlgorithmEx)(Handle, TensorDesc x, const void* x_data,
                                              FilterDesc w, const void* w_data, ConvDesc,
                                              TensorDesc y, void* y_data, int requested,
                                              int* returned, AlgoPerf* results,
                                              void* workspace, std::size_t workspace_bytes);
  Status (*FindConvolutionBackwardDataAlgorithmEx)(Handle, FilterDesc w, const void* w_data,
                                                   TensorDesc dy, const void* dy_data,
                                                   ConvDesc, TensorDesc dx, void* dx_data,
                                                   int requested, int* returned,
                                                   AlgoPerf* results, void* workspace,
                                                   std::size_t workspace_bytes);
  Status (*FindConvolutionBackwardFilterAlgorithmEx)(Handle, TensorDesc x, const void* x_data,
                                                     TensorDesc dy, const void* dy_data,
                                                     ConvDesc, FilterDesc dw, void* dw_data,
                                                     int requested, int* returned,
                                                     AlgoPerf* results, void* workspace,
                                                     std::size_t workspace_bytes);
};

}  // namespace cudnn
}  // namespace braidpy
