// Every accepted setting acts: for each key docs/input-format.md documents,
// a change of its value changes at least one output `simulate` reports
// (step time, its breakdown, FLOPs, memory by tag and stage, host and NVMe
// bytes, feasibility, the goal's steps and time) — in the stated direction
// where one is stated — or the key is listed as inert for simulate with the
// reason. A key in the document that is neither fails the test, so a new
// setting nobody prices cannot go unnoticed; an entry here for a key the
// document no longer has fails too.
//
// Each case patches a small base scenario (an 8-layer GPT on two DGX A100
// nodes) with what makes the key matter (JSON merge patch, RFC 7386), then
// with the change; both are simulated at layer granularity.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lowering/coarse.hpp"
#include "strategies/scenario.hpp"
#include "lowering/step_costs.hpp"

namespace strata::strategies {
namespace {

using nlohmann::json;

enum class Effect { Changes, StepUp, StepDown, PeakUp, PeakDown };

struct Case {
  const char* id;      // "section/key", the section from the document's heading
  const char* base;    // merge patch of kBase that makes the key act
  const char* change;  // merge patch of that: the key's new value
  Effect effect;
};

constexpr const char* kBase = R"({
  "model": {"layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000, "seq_len": 1024},
  "cluster": {"preset": "dgx-a100-80g", "nodes": 2},
  "batch": {"global": 64, "micro": 2},
  "plan": {}})";

// Shorthands for the bases several cases share.
#define GOAL R"("goal": {"target_loss": 2.5})"
#define MOE R"("model": {"moe": {"experts": 8, "top_k": 2}})"
#define WINDOW R"("model": {"attention_window": {"size": 256}})"
#define DGX1_NVLINKS                                                                                   \
  "[[0, 1, 1, 2, 2, 0, 0, 0], [1, 0, 2, 1, 0, 2, 0, 0], [1, 2, 0, 2, 0, 0, 1, 0], [2, 1, 2, 0, 0, 0, 0, 1], " \
  "[2, 0, 0, 0, 0, 1, 1, 2], [0, 2, 0, 0, 1, 0, 2, 1], [0, 0, 1, 0, 1, 2, 0, 2], [0, 0, 0, 1, 2, 1, 2, 0]]"
#define MLA R"("model": {"position_embedding": "rope", "mla": {"kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}})"
#define LR R"("goal": {"target_loss": 2.5}, "lr": {"base": 1e-4, "scaling": "linear", "reference_batch": 16})"

const Case kCases[] = {
    // ---- scenario ----
    {"/goal", "{}", R"({"goal": {"tokens": 1e10}})", Effect::Changes},
    {"/convergence", "{" GOAL "}", R"({"convergence": {"B_noise_tokens": {"value": 5e6, "source": "test"}}})",
     Effect::Changes},
    {"/lr", "{" GOAL "}", R"({"lr": {"base": 1e-4, "scaling": "linear", "reference_batch": 16}})", Effect::Changes},
    {"/calibration", "{}", R"({"calibration": "@/configs/calibration/h100-sxm.json"})", Effect::Changes},
    {"/stack", "{}", R"({"stack": "torchtitan"})", Effect::Changes},
    // ---- model ----
    {"model/layers", "{}", R"({"model": {"layers": 16}})", Effect::StepUp},
    {"model/hidden", "{}", R"({"model": {"hidden": 2048}})", Effect::StepUp},
    {"model/heads", R"({"plan": {"implementation": {"attention": "standard"}}})", R"({"model": {"heads": 32}})",
     Effect::PeakUp},
    {"model/kv_heads", "{}", R"({"model": {"kv_heads": 4}})", Effect::StepDown},
    {"model/ffn_hidden", "{}", R"({"model": {"ffn_hidden": 8192}})", Effect::StepUp},
    {"model/vocab", "{}", R"({"model": {"vocab": 64000}})", Effect::StepUp},
    {"model/seq_len", "{}", R"({"model": {"seq_len": 2048}})", Effect::StepUp},
    {"model/head_dim", "{}", R"({"model": {"head_dim": 128}})", Effect::StepUp},
    {"model/mlp", "{}", R"({"model": {"mlp": "swiglu"}})", Effect::StepUp},
    {"model/norm", "{}", R"({"model": {"norm": "rmsnorm"}})", Effect::PeakDown},
    {"model/norm_placement", "{}", R"({"model": {"norm_placement": "sandwich"}})", Effect::StepUp},
    {"model/block", "{}", R"({"model": {"block": "parallel"}})", Effect::Changes},
    {"model/qk_norm", "{}", R"({"model": {"qk_norm": "head"}})", Effect::StepUp},
    {"model/bias", "{}", R"({"model": {"bias": false}})", Effect::PeakDown},
    {"model/qkv_bias", R"({"model": {"bias": false}})", R"({"model": {"qkv_bias": true}})", Effect::PeakUp},
    {"model/position_embedding", "{}", R"({"model": {"position_embedding": "rope"}})", Effect::Changes},
    {"model/max_positions", "{}", R"({"model": {"max_positions": 8192}})", Effect::PeakUp},
    {"model/tied_embeddings", "{}", R"({"model": {"tied_embeddings": false}})", Effect::PeakUp},
    {"model/dropout", "{}", R"({"model": {"dropout": false}})", Effect::PeakDown},
    {"model/moe", "{}", "{" MOE "}", Effect::Changes},
    {"model/mla", R"({"model": {"position_embedding": "rope"}})",
     R"({"model": {"mla": {"kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}}})",
     Effect::Changes},
    {"model/experts", "{" MOE "}", R"({"model": {"moe": {"experts": 16}}})", Effect::PeakUp},
    {"model/top_k", "{" MOE "}", R"({"model": {"moe": {"top_k": 4}}})", Effect::StepUp},
    {"model/expert_ffn", "{" MOE "}", R"({"model": {"moe": {"expert_ffn": 8192}}})", Effect::StepUp},
    {"model/shared_experts", "{" MOE "}", R"({"model": {"moe": {"shared_experts": 1}}})", Effect::StepUp},
    {"model/shared_ffn", R"({"model": {"moe": {"experts": 8, "top_k": 2, "shared_experts": 1}}})",
     R"({"model": {"moe": {"shared_ffn": 8192}}})", Effect::StepUp},
    {"model/shared_gate", R"({"model": {"moe": {"experts": 8, "top_k": 2, "shared_experts": 1}}})",
     R"({"model": {"moe": {"shared_gate": true}}})", Effect::PeakUp},
    {"model/first_dense", "{" MOE "}", R"({"model": {"moe": {"first_dense": 2}}})", Effect::Changes},
    // Dense blocks (one MLP of ffn_hidden) cost less than expert blocks
    // (top_k 2 of them): experts in every 2nd block of 8, in 2 of 8 (every 3
    // from block 2: 2 and 5, against 0, 3, 6), or in all but 2.
    {"model/every", "{" MOE "}", R"({"model": {"moe": {"every": 2}}})", Effect::StepDown},
    {"model/offset", R"({"model": {"moe": {"experts": 8, "top_k": 2, "every": 3}}})",
     R"({"model": {"moe": {"offset": 2}}})", Effect::StepDown},
    {"model/dense_layers", "{" MOE "}", R"({"model": {"moe": {"dense_layers": [0, 1]}}})", Effect::StepDown},
    // A multi-token prediction module adds a block, a projection and a
    // second output layer to the head.
    {"model/mtp_layers", "{}", R"({"model": {"mtp_layers": 1}})", Effect::StepUp},
    // A window shorter than the sequence prices fewer keys a query; a wider
    // one, or full attention in every second layer, more.
    {"model/attention_window", "{}", "{" WINDOW "}", Effect::StepDown},
    // Soft-capping keeps one more score-sized (standard attention) or
    // logit-sized tensor.
    {"model/attn_softcap", R"({"plan": {"implementation": {"attention": "standard"}}})",
     R"({"model": {"attn_softcap": 50}})", Effect::PeakUp},
    {"model/logit_softcap", "{}", R"({"model": {"logit_softcap": 30}})", Effect::PeakUp},
    {"model/size", "{" WINDOW "}", R"({"model": {"attention_window": {"size": 512}}})", Effect::StepUp},
    {"model/global_every", "{" WINDOW "}", R"({"model": {"attention_window": {"global_every": 2}}})",
     Effect::StepUp},
    {"model/q_lora_rank", "{" MLA "}", R"({"model": {"mla": {"q_lora_rank": 256}}})", Effect::Changes},
    {"model/kv_lora_rank", "{" MLA "}", R"({"model": {"mla": {"kv_lora_rank": 512}}})", Effect::PeakUp},
    {"model/qk_nope_head_dim", "{" MLA "}", R"({"model": {"mla": {"qk_nope_head_dim": 128}}})", Effect::StepUp},
    {"model/qk_rope_head_dim", "{" MLA "}", R"({"model": {"mla": {"qk_rope_head_dim": 64}}})", Effect::StepUp},
    {"model/v_head_dim", "{" MLA "}", R"({"model": {"mla": {"v_head_dim": 128}}})", Effect::StepUp},
    // ---- cluster ----
    {"cluster/gpu", "{}", R"({"cluster": {"gpu": "h100-sxm"}})", Effect::StepDown},
    {"cluster/gpus_per_node", R"({"plan": {"zero": 3}})", R"({"cluster": {"gpus_per_node": 4, "nodes": 4}})",
     Effect::StepUp},
    {"cluster/nodes", "{}", R"({"cluster": {"nodes": 4}, "batch": {"global": 128}})", Effect::Changes},
    {"cluster/intra_node_GBps", R"({"plan": {"tp": 8}})", R"({"cluster": {"intra_node_GBps": 20}})", Effect::StepUp},
    // The DGX-1's hybrid cube-mesh on the node: the tensor-parallel pair
    // {0, 1} shares one link instead of the NVSwitch's full bandwidth.
    {"cluster/nvlinks", R"({"plan": {"tp": 2}})",
     R"({"cluster": {"nvlink_GBps": 25, "nvlinks": )" DGX1_NVLINKS "}}", Effect::StepUp},
    {"cluster/nvlink_GBps", R"({"plan": {"tp": 2}, "cluster": {"nvlink_GBps": 25, "nvlinks": )" DGX1_NVLINKS "}}",
     R"({"cluster": {"nvlink_GBps": 5}})", Effect::StepUp},
    {"cluster/inter_node_GBps_per_gpu", R"({"plan": {"zero": 3}})", R"({"cluster": {"inter_node_GBps_per_gpu": 1}})",
     Effect::StepUp},
    {"cluster/pcie_GBps", R"({"plan": {"offload": {"optimizer": "cpu"}}})", R"({"cluster": {"pcie_GBps": 1}})",
     Effect::StepUp},
    {"cluster/host_memory_GiB", R"({"plan": {"offload": {"optimizer": "cpu"}}})",
     R"({"cluster": {"host_memory_GiB": 0.01}})", Effect::Changes},
    // The second node's GPUs become V100s (fp16: a V100 has no bf16): its
    // stage, or every stage's data-parallel replicas there, run slower.
    {"cluster/groups", R"({"plan": {"precision": "fp16"}})",
     R"({"cluster": {"preset": null, "nodes": null, "groups": ["dgx-a100-80g", {"preset": "dgx-a100-80g", "gpu": "v100-32g"}]}})",
     Effect::StepUp},
    {"cluster/slow", "{}", R"({"cluster": {"slow": [{"rank": 3, "factor": 1.5}]}})", Effect::StepUp},
    {"cluster/nvme_GBps", R"({"plan": {"offload": {"optimizer": "nvme"}}})", R"({"cluster": {"nvme_GBps": 0.1}})",
     Effect::StepUp},
    {"cluster/nvme_GiB", R"({"plan": {"offload": {"optimizer": "nvme"}}})", R"({"cluster": {"nvme_GiB": 0.01}})",
     Effect::Changes},
    // ---- the GPU object ----
    {"gpu/preset", R"({"cluster": {"gpu": {"preset": "a100-80g"}}})", R"({"cluster": {"gpu": {"preset": "h100-sxm"}}})",
     Effect::StepDown},
    {"gpu/memory_GiB", R"({"cluster": {"gpu": {"preset": "a100-80g"}}})", R"({"cluster": {"gpu": {"memory_GiB": 1}}})",
     Effect::Changes},
    {"gpu/hbm_GBps", R"({"cluster": {"gpu": {"preset": "a100-80g"}}})", R"({"cluster": {"gpu": {"hbm_GBps": 100}}})",
     Effect::StepUp},
    // (Layers wide enough that the compute beside ZeRO-3's collectives
    // outweighs the gathers the compute lane waits for.)
    {"gpu/sms", R"({"model": {"hidden": 2048, "ffn_hidden": 8192}, "cluster": {"gpu": {"preset": "a100-80g"}}, "plan": {"zero": 3}})",
     R"({"cluster": {"gpu": {"sms": 0}}})", Effect::StepDown},
    // Tiles of 64 x 64: the base's GEMMs lose less to their last wave (its
    // QKV, 2048 x 3072: 1,536 tiles in 15 waves of 108 for 14.2, where
    // 256 x 128 tiles make 192 in 2 waves for 1.8).
    {"gpu/gemm_tile", R"({"cluster": {"gpu": {"preset": "a100-80g"}}})",
     R"({"cluster": {"gpu": {"gemm_tile": {"m": 64, "n": 64}}}})", Effect::StepDown},
    // Column-wise operands read in place: one per-tensor FP8 copy written, not two.
    {"gpu/fp8_block_scaling", R"({"cluster": {"gpu": {"preset": "h100-sxm"}}, "plan": {"precision": "fp8"}})",
     R"({"cluster": {"gpu": {"fp8_block_scaling": "native"}}})", Effect::StepDown},
    {"gpu/tflops", R"({"cluster": {"gpu": {"preset": "a100-80g"}}})",
     R"({"cluster": {"gpu": {"tflops": {"fp32": 19.5, "tf32": 156, "fp16": 100, "bf16": 100, "fp8": 0}}}})",
     Effect::StepUp},
    {"gpu/server", R"({"cluster": {"preset": null, "gpu": {"preset": "a100-80g"}, "nodes": 2}, "plan": {"tp": 8}})",
     R"({"cluster": {"gpu": {"server": {"intra_node_GBps": 20}}}})", Effect::StepUp},
    // ---- batch ----
    {"batch/global", "{}", R"({"batch": {"global": 128}})", Effect::StepUp},
    {"batch/micro", "{}", R"({"batch": {"micro": 4}})", Effect::PeakUp},
    // ---- plan ----
    {"plan/dp", "{}", R"({"plan": {"dp": 8, "tp": 2}})", Effect::Changes},
    {"plan/tp", "{}", R"({"plan": {"tp": 2}})", Effect::Changes},
    {"plan/pp", "{}", R"({"plan": {"pp": 2}})", Effect::Changes},
    {"plan/cp", "{}", R"({"plan": {"cp": 2}})", Effect::Changes},
    {"plan/ep", "{" MOE "}", R"({"plan": {"ep": 2}})", Effect::Changes},
    {"plan/zero", "{}", R"({"plan": {"zero": 3}})", Effect::PeakDown},
    {"plan/schedule", R"({"plan": {"pp": 2}})", R"({"plan": {"schedule": "gpipe"}})", Effect::PeakUp},
    {"plan/virtual_stages", R"({"plan": {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}})",
     R"({"plan": {"virtual_stages": 4}})", Effect::Changes},
    {"plan/stage_layers", R"({"plan": {"pp": 2}})", R"({"plan": {"stage_layers": [2, 6]}})", Effect::Changes},
    // 8 layers over 4 chunks: [2, 2, 2, 2] against [1, 3, 3, 1].
    {"plan/pipeline_layout", R"({"plan": {"pp": 4}})", R"({"plan": {"pipeline_layout": "embedding_head_as_layers"}})",
     Effect::Changes},
    {"plan/sequence_parallel", R"({"plan": {"tp": 2}})", R"({"plan": {"sequence_parallel": true}})",
     Effect::PeakDown},
    {"plan/recompute", "{}", R"({"plan": {"recompute": "full"}})", Effect::PeakDown},
    // The kept layer inputs split over tp: less memory (and a gather before
    // each rerun).
    {"plan/partition_activations", R"({"plan": {"tp": 4, "recompute": "full"}})",
     R"({"plan": {"partition_activations": true}})", Effect::PeakDown},
    {"plan/recompute_k", R"({"plan": {"recompute": "every_k", "recompute_k": 2}})", R"({"plan": {"recompute_k": 4}})",
     Effect::Changes},
    // The norms' outputs dropped and rerun: less kept, a little more time.
    {"plan/recompute_modules", R"({"plan": {"recompute": "selective"}})",
     R"({"plan": {"recompute_modules": ["core_attn", "layernorm"]}})", Effect::PeakDown},
    {"plan/memory_budget_GiB", R"({"plan": {"recompute": "optimal"}, "batch": {"global": 128, "micro": 8}})",
     R"({"plan": {"memory_budget_GiB": 4}})", Effect::PeakDown},
    {"plan/optimizer", "{}", R"({"plan": {"optimizer": "sgd"}})", Effect::PeakDown},
    {"plan/precision", "{}", R"({"plan": {"precision": "fp32"}})", Effect::StepUp},
    {"plan/optimizer_states", "{}", R"({"plan": {"optimizer_states": "bf16"}})", Effect::PeakDown},
    // The blocks' weights as FP8 parameters: no 16-bit copy.
    {"plan.implementation/fp8_param_gather",
     R"({"cluster": {"gpu": {"preset": "h100-sxm"}}, "plan": {"precision": "fp8", "zero": 1}})",
     R"({"plan": {"implementation": {"fp8_param_gather": true}}})", Effect::PeakDown},
    // ZeRO-3 per module: a collective per linear layer and norm, each paying its latency.
    {"plan.implementation/zero3_gather_per_module", R"({"plan": {"zero": 3}})",
     R"({"plan": {"implementation": {"zero3_gather_per_module": true}}})", Effect::StepUp},
    // The norms stay whole: fewer collectives.
    {"plan.implementation/zero3_persistence_threshold",
     R"({"plan": {"zero": 3, "implementation": {"zero3_gather_per_module": true}}})",
     R"({"plan": {"implementation": {"zero3_persistence_threshold": 100000}}})", Effect::StepDown},
    // FSDP's root module held gathered beside two layers.
    // FSDP2's copy-out: one more memory-bound pass per gather.
    {"plan.implementation/zero3_gather_copy_out", R"({"plan": {"zero": 3}})",
     R"({"plan": {"implementation": {"zero3_gather_copy_out": true}}})", Effect::StepUp},
    // DeepSpeed's gradient bucket (5e8 elements): a GiB-sized buffer for the
    // whole step and a full bucket's copy in the backward, where FSDP stages
    // one layer's gradient.
    {"plan.implementation/zero3_reduce_bucket", R"({"plan": {"zero": 3}})",
     R"({"plan": {"implementation": {"zero3_reduce_bucket": 500000000}}})", Effect::PeakUp},
    // DeepSpeed's coordinator prefetching 5e7 elements a use up to 1e9
    // gathered, where FSDP holds a layer and the next.
    {"plan.implementation/zero3_max_live",
     R"({"plan": {"zero": 3, "implementation": {"zero3_gather_per_module": true, "zero3_prefetch_bucket": 50000000}}})",
     R"({"plan": {"implementation": {"zero3_max_live": 1000000000}}})", Effect::PeakUp},
    // With the coordinator: prefetching holds more than gathering on demand.
    {"plan.implementation/zero3_prefetch_bucket",
     R"({"plan": {"zero": 3, "implementation": {"zero3_gather_per_module": true, "zero3_max_live": 1000000000}}})",
     R"({"plan": {"implementation": {"zero3_prefetch_bucket": 50000000}}})", Effect::PeakUp},
    // ... and keeping what the trace soon uses again more than releasing it.
    {"plan.implementation/zero3_reuse_distance",
     R"({"plan": {"zero": 3, "implementation": {"zero3_gather_per_module": true, "zero3_max_live": 1000000000}}})",
     R"({"plan": {"implementation": {"zero3_reuse_distance": 1000000000}}})", Effect::PeakUp},
    // DeepSpeed's narrow per rank of every gathered and reduced tensor: the
    // host, at 5 µs an operation, is the bound on 8 ranks' small layers.
    {"plan.implementation/zero3_host_per_rank", R"({"plan": {"zero": 3, "implementation": {"host_dispatch_us": 5}}})",
     R"({"plan": {"implementation": {"zero3_host_per_rank": true}}})", Effect::StepUp},
    // FSDP1's flat gradients: one more memory-bound pass per layer's backward.
    {"plan.implementation/zero3_flat_grads", R"({"plan": {"zero": 3}})",
     R"({"plan": {"implementation": {"zero3_flat_grads": true}}})", Effect::StepUp},
    {"plan.implementation/zero3_root_unsharded", R"({"plan": {"zero": 3}})",
     R"({"plan": {"implementation": {"zero3_root_unsharded": true}}})", Effect::PeakUp},
    // Block scales emulated on Hopper: the GEMMs no faster than BF16 / 1.75.
    {"plan/fp8_recipe", R"({"cluster": {"gpu": {"preset": "h100-sxm"}}, "plan": {"precision": "fp8"}})",
     R"({"plan": {"fp8_recipe": "blockwise"}})", Effect::StepUp},
    // Two of eight blocks multiply in bf16 instead of FP8.
    {"plan/bf16_layers", R"({"cluster": {"gpu": {"preset": "h100-sxm"}}, "plan": {"precision": "fp8"}})",
     R"({"plan": {"bf16_layers": {"first": 1, "last": 1}}})", Effect::StepUp},
    {"plan/dp_topology", "{}", R"({"plan": {"dp_topology": "parameter_server"}})", Effect::Changes},
    // ---- plan.offload ----
    {"plan.offload/activations", "{}", R"({"plan": {"offload": {"activations": true}}})", Effect::PeakDown},
    {"plan.offload/weights", "{}", R"({"plan": {"offload": {"weights": true}}})", Effect::PeakDown},
    {"plan.offload/optimizer", "{}", R"({"plan": {"offload": {"optimizer": "cpu"}}})", Effect::PeakDown},
    // The busiest expert-parallel rank's load: more expert work and
    // all-to-all bytes (a capacity below the imbalance cuts it; padding
    // raises a balanced router's to the capacity).
    {"plan.moe/load_imbalance", "{" MOE R"(, "plan": {"ep": 2}})", R"({"plan": {"moe": {"load_imbalance": 1.5}}})",
     Effect::StepUp},
    {"plan.moe/capacity_factor", "{" MOE R"(, "plan": {"ep": 2, "moe": {"load_imbalance": 1.5}}})",
     R"({"plan": {"moe": {"capacity_factor": 1.1}}})", Effect::StepDown},
    {"plan.moe/pad_to_capacity", "{" MOE R"(, "plan": {"ep": 2, "moe": {"capacity_factor": 1.5}}})",
     R"({"plan": {"moe": {"pad_to_capacity": true}}})", Effect::StepUp},
    {"plan.offload/prefetch_depth", R"({"plan": {"offload": {"activations": true}}})",
     R"({"plan": {"offload": {"prefetch_depth": 0}}})", Effect::StepUp},
    {"plan.offload/planner", R"({"plan": {"offload": {"activations": true}}})",
     R"({"plan": {"offload": {"planner": "vdnn"}}})", Effect::Changes},
    // ---- plan.compression ----
    {"plan.compression/method", "{}", R"({"plan": {"compression": {"method": "topk"}}})", Effect::Changes},
    {"plan.compression/ratio", R"({"plan": {"compression": {"method": "topk"}}})",
     R"({"plan": {"compression": {"ratio": 0.1}}})", Effect::Changes},
    {"plan.compression/error_feedback", R"({"plan": {"compression": {"method": "topk"}}})",
     R"({"plan": {"compression": {"error_feedback": false}}})", Effect::PeakDown},
    {"plan.compression/bits", R"({"plan": {"compression": {"method": "qsgd"}}})",
     R"({"plan": {"compression": {"bits": 2}}})", Effect::Changes},
    {"plan.compression/rank", R"({"plan": {"compression": {"method": "powersgd"}}})",
     R"({"plan": {"compression": {"rank": 1}}})", Effect::Changes},
    {"plan/ps_staleness", R"({"plan": {"dp_topology": "parameter_server"}})", R"({"plan": {"ps_staleness": 1}})",
     Effect::StepDown},
    // Top-k's all-gathers over 16 GPUs, bucket by bucket under the backward.
    {"plan.compression/bucketed", R"({"plan": {"compression": {"method": "topk"}}})",
     R"({"plan": {"compression": {"bucketed": true}}})", Effect::StepDown},
    // ---- plan.implementation ----
    {"plan.implementation/attention", "{}", R"({"plan": {"implementation": {"attention": "standard"}}})",
     Effect::PeakUp},
    {"plan.implementation/fused_elementwise", R"({"model": {"norm": "rmsnorm", "position_embedding": "rope"}})",
     R"({"plan": {"implementation": {"fused_elementwise": false}}})", Effect::StepUp},
    {"plan.implementation/overlap_grad_reduce", "{}", R"({"plan": {"implementation": {"overlap_grad_reduce": false}}})",
     Effect::StepUp},
    {"plan.implementation/overlap_param_gather", R"({"plan": {"zero": 1}})",
     R"({"plan": {"implementation": {"overlap_param_gather": false}}})", Effect::StepUp},
    {"plan.implementation/tp_comm_overlap", R"({"plan": {"tp": 8, "sequence_parallel": true}})",
     R"({"plan": {"implementation": {"tp_comm_overlap": "ring"}}})", Effect::StepDown},
    // Either way: here the ring's one exchange is not hidden by this small
    // model's attention and moves at send/recv's rate, slower than the
    // all-gather's; with long sequences the ring hides (step_costs_test.cpp).
    {"plan.implementation/cp_comm", R"({"plan": {"cp": 2}})",
     R"({"plan": {"implementation": {"cp_comm": "all_gather"}}})", Effect::Changes},
    {"plan.implementation/pp_scatter_gather", R"({"plan": {"tp": 2, "pp": 2}, "cluster": {"nodes": 4}})",
     R"({"plan": {"implementation": {"pp_scatter_gather": true}}})", Effect::Changes},
    {"plan.implementation/overlap_p2p", R"({"plan": {"pp": 4, "schedule": "interleaved"}})",
     R"({"plan": {"implementation": {"overlap_p2p": true}}})", Effect::Changes},
    {"plan.implementation/fp32_grad_accumulation", "{}",
     R"({"plan": {"implementation": {"fp32_grad_accumulation": true}}})", Effect::PeakUp},
    // Two fp32 gradients of the logits held in the loss's backward, and more
    // bytes moved.
    {"plan.implementation/cross_entropy", "{}", R"({"plan": {"implementation": {"cross_entropy": "unfused"}}})",
     Effect::PeakUp},
    // Two evaluations of the logits a microbatch by PyTorch's cross-entropy,
    // without gradient: more bytes moved, nothing more kept.
    {"plan.implementation/train_metric_passes", "{}",
     R"({"plan": {"implementation": {"train_metric_passes": 2}}})", Effect::StepUp},
    {"plan.implementation/tp_grad_overlap", R"({"plan": {"tp": 8}})",
     R"({"plan": {"implementation": {"tp_grad_overlap": false}}})", Effect::StepUp},
    // The column-parallel linears keep their gathered inputs: tp times the
    // bytes of those two saved tensors.
    {"plan.implementation/sp_regather_input", R"({"plan": {"tp": 8, "sequence_parallel": true}})",
     R"({"plan": {"implementation": {"sp_regather_input": false}}})", Effect::PeakUp},
    {"plan.implementation/host_dispatch_us", "{}", R"({"plan": {"implementation": {"host_dispatch_us": 100}}})",
     Effect::StepUp},
    // Gradients reduced in bf16 beside an fp32 accumulation: half the bytes
    // in every data-parallel reduction across the two nodes.
    {"plan.implementation/grad_reduce_dtype", R"({"plan": {"implementation": {"fp32_grad_accumulation": true}}})",
     R"({"plan": {"implementation": {"grad_reduce_dtype": "bf16"}}})", Effect::StepDown},
    {"plan.implementation/grad_accumulation_fusion", R"({"plan": {"implementation": {"fp32_grad_accumulation": true}}})",
     R"({"plan": {"implementation": {"grad_accumulation_fusion": false}}})", Effect::StepUp},
    {"plan.implementation/rank_order", R"({"plan": {"tp": 2, "pp": 2}})",
     R"({"plan": {"implementation": {"rank_order": "pp-dp-cp-tp"}}})", Effect::Changes},
    // ---- goal, convergence and lr ----
    {"goal/goal.tokens", R"({"goal": {"tokens": 1e10}})", R"({"goal": {"tokens": 2e10}})", Effect::Changes},
    {"goal/goal.target_loss", "{" GOAL "}", R"({"goal": {"target_loss": 2.6}})", Effect::Changes},
    {"goal/convergence", "{" GOAL "}", R"({"convergence": "cpu-tiny", "goal": {"target_loss": null, "tokens": 1e10}})",
     Effect::Changes},
    {"goal/lr.base", "{" LR "}", R"({"lr": {"base": 1e-2}})", Effect::Changes},
    {"goal/lr.scaling", "{" LR "}", R"({"lr": {"scaling": "sqrt"}})", Effect::Changes},
    {"goal/lr.warmup_steps", "{" LR "}", R"({"lr": {"warmup_steps": 100}})", Effect::Changes},
    {"goal/lr.reference_batch", "{" LR "}", R"({"lr": {"reference_batch": 32}})", Effect::Changes},
};

// Keys simulate does not price, and why.
const std::map<std::string, std::string> kInert = {
    {"/model", "an object: its keys are checked one by one"},
    {"/cluster", "an object: its keys are checked one by one"},
    {"/batch", "an object: its keys are checked one by one"},
    {"/plan", "an object: its keys are checked one by one"},
    {"/space", "explore's axes, each a plan key checked here; simulate does not search"},
    {"/name", "a label for people"},
    {"plan.implementation/allocator",
     "read only by simulate's caching-allocator replay (allocator_replay, a figure reported beside the peak), "
     "which the replayed program here does not run; memory_test checks that each mode reaches it"},
    {"/description", "a label for people"},
    {"model/preset", "picks a model whose fields are checked here"},
    {"model/file", "reads a model whose fields are checked here"},
    {"model/name", "a label for people"},
    {"model/source", "a label for people"},
    {"model/rope_theta", "prices nothing (documented): strata export passes it on as --rotary-base"},
    {"model/ignore_hf_keys", "Hugging Face import only: the config keys the import may drop"},
    {"chain/chain.input_bytes",
     "layer-chain models are priced by describe and tradeoff; simulate refuses them (tested in tradeoff_test)"},
    {"chain/chain.layers",
     "layer-chain models are priced by describe and tradeoff; simulate refuses them (tested in tradeoff_test)"},
    {"cluster/preset", "picks a cluster whose fields are checked here"},
    {"cluster/file", "reads a cluster whose fields are checked here"},
    {"cluster/name", "a label for people"},
    {"cluster/source", "a label for people"},
    {"cluster/stragglers", "adds its own output, the sampled step-time distribution (stragglers_test.cpp); the "
                           "step itself is the one without it"},
    {"gpu/name", "a label for people"},
    {"gpu/source", "a label for people"},
    {"plan/offload", "an object: its keys are checked one by one"},
    {"plan/compression", "an object: its keys are checked one by one"},
    {"plan/moe", "an object: its keys are checked one by one"},
    {"plan/implementation", "an object: its keys are checked one by one"},
};

// The document's sections whose key tables are checked, by heading.
const std::map<std::string, std::string> kSections = {
    {"## Scenario", ""},
    {"## `model`", "model"},
    {"### Layer-chain models (`chain`)", "chain"},
    {"## `cluster`", "cluster"},
    {"### GPU object", "gpu"},
    {"## `batch`", "batch"},
    {"## `plan`", "plan"},
    {"### `plan.offload`", "plan.offload"},
    {"### `plan.moe`", "plan.moe"},
    {"### `plan.compression`", "plan.compression"},
    {"### `plan.implementation`", "plan.implementation"},
    {"## `goal`, `convergence` and `lr`", "goal"},
};
// Not checked here: "### Rules between keys" and "### Limits" (rules, not
// keys), "## Convergence files" (a fit's own keys: convergence_test.cpp),
// "## `space`" (explore's axes: space_test.cpp), "## Presets" (names).

bool is_key(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

// "section/key" for every key in the first column of a key table ("| key
// | …" header) of a checked section.
std::set<std::string> documented_keys() {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/docs/input-format.md");
  REQUIRE(in);
  std::set<std::string> out;
  const std::string* section = nullptr;
  bool key_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind('#', 0) == 0) {
      const auto it = kSections.find(line);
      section = it == kSections.end() ? nullptr : &it->second;
      key_table = false;
      continue;
    }
    if (line.rfind("| key |", 0) == 0) {
      key_table = true;
      continue;
    }
    if (line.rfind('|', 0) != 0) {
      key_table = false;
      continue;
    }
    if (!section || !key_table) continue;
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    if (first.find_first_not_of(" ") == std::string::npos || first[first.find_first_not_of(" ")] != '`') continue;
    for (std::size_t a = first.find('`'); a != std::string::npos; a = first.find('`', first.find('`', a + 1) + 1)) {
      const std::size_t b = first.find('`', a + 1);
      if (b == std::string::npos) break;
      const std::string k = first.substr(a + 1, b - a - 1);
      if (is_key(k)) out.insert(*section + "/" + k);
    }
  }
  return out;
}

// Every figure simulate reports, by name (NaN where it reports none).
std::map<std::string, double> outputs(const std::string& text) {
  const Scenario sc = parse_scenario(text, "sensitivity.json", STRATA_SOURCE_DIR);
  require_valid_plan(sc);
  const ModelStepCosts costs(sc);
  const ChunkPrediction pr = predict_replayed(sc, costs);
  std::map<std::string, double> o;
  const auto t = [](Time v) { return static_cast<double>(v); };
  const StepPrediction& s = pr.step;
  o["step_time"] = t(s.step_time);
  o["compute"] = t(s.breakdown.compute);
  o["recompute"] = t(s.breakdown.recompute);
  for (std::size_t k = 0; k < kCommKinds; ++k) o["exposed_comm." + std::to_string(k)] = t(s.breakdown.exposed_comm[k]);
  o["bubble"] = t(s.breakdown.bubble);
  o["offload_stall"] = t(s.breakdown.offload_stall);
  o["optimizer"] = t(s.breakdown.optimizer);
  o["interference"] = t(s.breakdown.interference);
  o["pipeline_fill"] = t(s.pipeline_fill);
  o["model_flops"] = s.model_flops_per_step;
  o["hardware_flops"] = s.hardware_flops_per_step;
  o["critical_stage"] = s.critical_stage;
  const MemoryEstimate& m = pr.memory;
  o["peak"] = static_cast<double>(m.peak_bytes);
  o["feasible"] = m.feasible() ? 1 : 0;
  o["gpu_capacity"] = static_cast<double>(m.gpu_capacity);
  o["host"] = static_cast<double>(m.host_bytes_per_node);
  o["host_capacity"] = static_cast<double>(m.host_capacity_per_node);
  o["nvme"] = static_cast<double>(m.nvme_bytes_per_node);
  o["nvme_capacity"] = static_cast<double>(m.nvme_capacity_per_node);
  for (std::size_t k = 0; k < m.breakdown.size(); ++k) o["tag." + std::to_string(k)] = static_cast<double>(m.breakdown[k]);
  for (const StageMemory& st : m.stages) {
    const std::string at = std::to_string(st.stage);
    o["stage.total." + at] = static_cast<double>(st.total);
    o["stage.params." + at] = static_cast<double>(st.params);
    o["stage.in_flight." + at] = static_cast<double>(st.in_flight);
    o["stage.host." + at] = static_cast<double>(st.host_bytes);
    o["stage.nvme." + at] = static_cast<double>(st.nvme_bytes);
  }
  o["gpus"] = static_cast<double>(sc.cluster.gpus());
  const double nan = std::nan("");
  o["goal.steps"] = o["goal.tokens"] = o["goal.lr"] = o["goal.lr_ratio"] = o["goal.time"] = nan;
  if (const auto g = estimate_goal(sc)) {
    o["goal.reachable"] = g->reachable ? 1 : 0;
    o["goal.steps"] = static_cast<double>(g->steps);
    o["goal.tokens"] = g->tokens;
    o["goal.lr"] = g->lr.value_or(nan);
    o["goal.lr_ratio"] = g->lr_ratio;
    o["goal.penalty"] = g->penalties.total();
    if (const auto tt = time_to_train(sc, *g, static_cast<double>(s.step_time) * 1e-9)) o["goal.time"] = tt->seconds;
  }
  return o;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::string with_source_dir(std::string s) {
  for (std::size_t at; (at = s.find("\"@/")) != std::string::npos;) s.replace(at + 1, 1, STRATA_SOURCE_DIR);
  return s;
}

TEST_CASE("every documented key is checked for its effect on simulate, or named inert with the reason") {
  const std::set<std::string> documented = documented_keys();
  // The document's tables were read (a heading renamed would empty a section).
  CHECK(documented.size() > 100);
  std::set<std::string> listed;
  for (const Case& c : kCases) CHECK_MESSAGE(listed.insert(c.id).second, "listed twice: " << c.id);
  for (const auto& [id, why] : kInert) {
    CHECK_MESSAGE(!why.empty(), id);
    CHECK_MESSAGE(listed.insert(id).second, "both checked and inert: " << id);
  }
  for (const std::string& k : documented)
    CHECK_MESSAGE(listed.count(k), "docs/input-format.md documents " << k << ": check its effect or say why it has none");
  for (const std::string& k : listed)
    CHECK_MESSAGE(documented.count(k), k << " is listed here but not documented in docs/input-format.md");
}

TEST_CASE("offload.weights \"nvme\": read from NVMe before each copy, so slower than from host memory") {
  // The key's second value (true is checked above): each layer's weights
  // come from NVMe (50 GB/s per DGX A100 node, shared by its 8 GPUs) into
  // host staging, then over PCIe; the stepped weights are written back.
  json base = json::parse(kBase);
  base.merge_patch(json::parse(R"({"plan": {"offload": {"weights": true, "optimizer": "cpu"}}})"));
  json nvme = base;
  nvme.merge_patch(json::parse(R"({"plan": {"offload": {"weights": "nvme"}}})"));
  const auto a = outputs(base.dump()), b = outputs(nvme.dump());
  CHECK(b.at("step_time") > a.at("step_time"));
}

TEST_CASE("a change of every priced key changes what simulate reports, in the stated direction") {
  for (const Case& c : kCases) {
    const std::string id = c.id;
    CAPTURE(id);
    json base = json::parse(kBase);
    base.merge_patch(json::parse(with_source_dir(c.base)));
    json changed = base;
    changed.merge_patch(json::parse(with_source_dir(c.change)));
    REQUIRE_MESSAGE(changed != base, "the change patch changes nothing in the scenario");
    std::map<std::string, double> a, b;
    try {
      a = outputs(base.dump());
      b = outputs(changed.dump());
    } catch (const std::exception& e) {
      FAIL_CHECK((id + ": " + e.what()));
      continue;
    }
    bool differs = a.size() != b.size();
    for (const auto& [k, v] : a)
      if (!b.count(k) || !same(v, b.at(k))) differs = true;
    CHECK_MESSAGE(differs, (id + " changes no output of simulate"));
    switch (c.effect) {
      case Effect::Changes: break;
      case Effect::StepUp: CHECK_MESSAGE(b["step_time"] > a["step_time"], (id + ": step time should rise")); break;
      case Effect::StepDown: CHECK_MESSAGE(b["step_time"] < a["step_time"], (id + ": step time should fall")); break;
      case Effect::PeakUp: CHECK_MESSAGE(b["peak"] > a["peak"], (id + ": peak memory should rise")); break;
      case Effect::PeakDown: CHECK_MESSAGE(b["peak"] < a["peak"], (id + ": peak memory should fall")); break;
    }
  }
}

}  // namespace
}  // namespace strata::strategies
