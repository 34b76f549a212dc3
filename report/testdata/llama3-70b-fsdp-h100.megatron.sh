# Megatron-LM pretrain_gpt.py flags: llama3-70b on 64 x h100-sxm: dp 8, tp 8, pp 1, cp 1, zero 3, global batch 256, micro 1
# note: implementation.attention = cudnn, Megatron-LM's default (the plan had flash, Strata's default; set it in plan.implementation to export it, or simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# note: implementation.overlap_grad_reduce = false, Megatron-LM's default (the plan had true, Strata's default; set it in plan.implementation to export it, or simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# note: implementation.overlap_param_gather = false, Megatron-LM's default (the plan had true, Strata's default; set it in plan.implementation to export it, or simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# note: implementation.pp_scatter_gather = true, Megatron-LM's default (the plan had false, Strata's default; set it in plan.implementation to export it, or simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# note: implementation.fp32_grad_accumulation = true, Megatron-LM's default (the plan had false, Strata's default; set it in plan.implementation to export it, or simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# note: implementation.host_dispatch_us = 5 us, Megatron-LM's default (the plan had 0 us, Strata's default; no flag sets it: simulate with "stack": "megatron-lm-2025" to predict what the engine runs)
# world size 64 = dp 8 x tp 8 x pp 1 x cp 1; add data, tokenizer, learning-rate and checkpoint flags (not part of a plan)
# note: zero=3: Megatron-FSDP (--use-megatron-fsdp), which needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1
# note: vocabulary 128256: comes from the tokenizer (--tokenizer-type, --vocab-size with NullTokenizer; padded to --make-vocab-size-divisible-by)
--tensor-model-parallel-size 8 \
--pipeline-model-parallel-size 1 \
--context-parallel-size 1 \
--sequence-parallel \
--use-megatron-fsdp \
--data-parallel-sharding-strategy optim_grads_params \
--use-distributed-optimizer \
--no-gradient-accumulation-fusion \
--ckpt-format fsdp_dtensor \
--recompute-granularity full \
--recompute-method uniform \
--recompute-num-layers 1 \
--optimizer adam \
--bf16 \
--micro-batch-size 1 \
--global-batch-size 256 \
--num-layers 80 \
--hidden-size 8192 \
--ffn-hidden-size 28672 \
--num-attention-heads 64 \
--group-query-attention \
--num-query-groups 8 \
--seq-length 8192 \
--max-position-embeddings 8192 \
--swiglu \
--normalization RMSNorm \
--position-embedding-type rope \
--rotary-base 500000 \
--untie-embeddings-and-output-weights \
--disable-bias-linear \
--attention-dropout 0 \
--hidden-dropout 0 \
--attention-backend fused
