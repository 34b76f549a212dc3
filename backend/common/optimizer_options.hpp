#pragma once
// The optimizers' hyperparameters, as both backends' optimizers take them
// (backend/cpu/optimizer.hpp defines the update rules; the CUDA kernels
// compute the same).
#include <cstdint>

namespace strata::backend {

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;      // 0: plain SGD
  float weight_decay = 0.0f;  // L2: g += wd·p
};

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // true: AdamW (p −= lr·wd·p), false: Adam (g += wd·p)
};

struct Adam8bitOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled (AdamW)
  std::int64_t block = 2048;  // elements per quantization block
};

struct LarsOptions {
  float lr = 1e-1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float trust_coefficient = 1e-3f;  // η
};

struct LambOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-6f;
  float weight_decay = 0.0f;
};

struct AdafactorOptions {
  float lr = 1e-2f;              // a fixed step (no relative step size)
  float decay_rate = -0.8f;      // β̂₂ₜ = 1 − t^decay_rate
  float eps1 = 1e-30f;           // added to g²
  float clip_threshold = 1.0f;   // d: updates scaled down to RMS <= d
};

struct Sm3Options {
  float lr = 1e-1f;
};

}  // namespace strata::backend
