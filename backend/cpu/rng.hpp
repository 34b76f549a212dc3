#pragma once
// The shared generator (backend/common/rng.hpp) under the CPU backend's
// name, for code outside backend/ that spells it cpu::Rng.
#include "backend/common/rng.hpp"

namespace strata::backend::cpu {
using backend::Rng;
}  // namespace strata::backend::cpu
