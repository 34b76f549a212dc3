#include "costmodel/hardware.hpp"

namespace strata::cost {

double GpuSpec::peak_tflops(Precision p) const {
  switch (p) {
    case Precision::FP32: return tflops.fp32;
    case Precision::FP16: return tflops.fp16;
    case Precision::BF16: return tflops.bf16;
    case Precision::FP8: return tflops.fp8;
  }
  return 0;
}

}  // namespace strata::cost
