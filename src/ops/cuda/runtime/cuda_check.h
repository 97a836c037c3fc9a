// Error checking for CUDA runtime and cuBLAS calls: failures become core::Error naming the call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define TESSERA_CUDA_CHECK(call)                                                                                   \
  do {                                                                                                             \
    cudaError_t err_ = (call);                                                                                     \
    if (err_ != cudaSuccess)                                                                                       \
      ::tessera::core::fail("CUDA error {} ({}) in {} at {}:{}", static_cast<int>(err_), cudaGetErrorString(err_), \
                            #call, __FILE__, __LINE__);                                                            \
  } while (0)

#define TESSERA_CUBLAS_CHECK(call)                                                                               \
  do {                                                                                                           \
    cublasStatus_t st_ = (call);                                                                                 \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                            \
      ::tessera::core::fail("cuBLAS error {} in {} at {}:{}", static_cast<int>(st_), #call, __FILE__, __LINE__); \
  } while (0)

// Checks the last kernel launch.
#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())
