/* cuda_caps.h — what the CUDA backend runs: its KV cache types, its weight types (each with the
 * type its activations are converted to) and its features. Plain C without the CUDA headers.
 *
 * One list, two readers: the kernels dispatch on it (attention.cu's KV types, matmul.cu's
 * vec_dot types, elementwise.cu's embedding rows) and cuda_backend.c refuses from it, while
 * cuda_caps.c answers lm_backend_kv_type_ok and its siblings (kernels/backend.h) from it in
 * every build, with or without nvcc, so the planner refuses a cuda worker work its backend
 * lacks before any worker starts, in the backend's own words.
 */
#ifndef LM_CUDA_CAPS_H
#define LM_CUDA_CAPS_H

/* The KV cache types the kernels store and attend over, each with its specialisation of
 * struct kvt in attention.cu. A new type is one entry here, one specialisation there and its
 * row size (common/model/kv_geom.c): nothing else dispatches on it. */
#define LMC_KV_TYPES(X) \
	X(LM_F32) X(LM_F16) X(LM_BF16) X(LM_Q8_0) X(LM_Q4_0) X(LM_Q5_1) X(LM_FP8_E4M3)

/* The weight types of matmul and get_rows, each with its vec_dot type (backend.h's matmul
 * contract). */
#define LMC_WEIGHT_TYPES(X) \
	X(LM_F32, LM_F32)   \
	X(LM_F16, LM_F16)   \
	X(LM_BF16, LM_BF16) \
	X(LM_Q8_0, LM_Q8_0) \
	X(LM_Q4_0, LM_Q8_0) X(LM_MXFP4, LM_Q8_0) X(LM_Q4_K, LM_Q8_K) X(LM_Q6_K, LM_Q8_K)

/* The features of backend.h's enum lm_backend_feature the kernels have (1) or lack (0). */
#define LMC_HAS_ATTN_SINKS 1
#define LMC_HAS_ROPE_YARN  1
#define LMC_HAS_SWIGLU_OAI 1

#endif
