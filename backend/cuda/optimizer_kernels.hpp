#pragma once
// The kernels of the CUDA backend's 8-bit Adam, LARS, LAMB, Adafactor and
// SM3 (optimizer_kernels.cu), enqueued on `stream`, each computing with the
// functions of optimizer_math.hpp what backend/cpu/optimizer.cpp computes for
// one parameter tensor. Every launch does nothing when *skip != 0 on the
// device (a non-finite gradient was found this step); skip may be null.
// Per-tensor norms are reduced on the device: a fixed grid of blocks writes
// partial sums (double) to `scratch`, one block adds them in a fixed order,
// and the update reads the total there, so the host never waits. Internal to
// backend/cuda; plain C++17.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/optimizer_math.hpp"

namespace strata::backend::cuda::kernels {

// Doubles of `scratch` a LARS, LAMB or Adafactor launch needs: the partial
// sums of up to 256 blocks, two per block, and the two totals.
inline constexpr std::int64_t kOptimizerScratch = 2 * 256 + 2;

// One CUDA block per quantization block of `block` elements (the last may be
// short): codes mc, vc (n bytes each), absmax m_max, v_max (one per block).
void adam8bit_step(cudaStream_t s, float* p, const float* g, std::uint8_t* mc, std::uint8_t* vc,
                   float* m_max, float* v_max, std::int64_t n, std::int64_t block,
                   const math::Adam8bitStep& a, const math::QuantMaps& maps, const int* skip);
// Velocity v; Σw² and Σg² reduced first.
void lars_step(cudaStream_t s, float* p, const float* g, float* v, std::int64_t n,
               const math::LarsStep& a, double* scratch, const int* skip);
// Moments m, v and Σw², Σu² in one pass, then the update.
void lamb_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
               const math::LambStep& a, double* scratch, const int* skip);
// A rows × cols matrix with row statistics r [rows] and column statistics
// c [cols], or (c null) a tensor of rows·cols elements with a full r. u:
// rows·cols floats of scratch (the update before clipping).
void adafactor_step(cudaStream_t s, float* p, const float* g, float* r, float* c,
                    std::int64_t rows, std::int64_t cols, const math::AdafactorStep& a, float* u,
                    double* scratch, const int* skip);
// Row and column covers r [rows], c [cols] of a matrix, or (c null) a full
// accumulator r of rows·cols elements (Adagrad). new_c: cols floats of scratch.
void sm3_step(cudaStream_t s, float* p, const float* g, float* r, float* c, std::int64_t rows,
              std::int64_t cols, float lr, float* new_c, const int* skip);

}  // namespace strata::backend::cuda::kernels
