/* cuda_caps.c — the CUDA backend's lists (cuda_caps.h) as backend.h's queries. Built in every
 * build: into the CUDA backend's library when nvcc is there, else beside kernels/backend.c, so
 * the planner asks the same lists with or without CUDA. */
#include "kernels/cuda/cuda_caps.h"

#include "kernels/backend.h"

bool lm_backend_cuda_kv_type_ok(enum lm_dtype t)
{
	switch (t) {
#define CAPS_KV_CASE(TY) case TY:
		LMC_KV_TYPES(CAPS_KV_CASE)
#undef CAPS_KV_CASE
		return true;
	default:
		return false;
	}
}

bool lm_backend_cuda_weight_type_ok(enum lm_dtype t)
{
	switch (t) {
#define CAPS_W_CASE(TY, VDT) case TY:
		LMC_WEIGHT_TYPES(CAPS_W_CASE)
#undef CAPS_W_CASE
		return true;
	default:
		return false;
	}
}

bool lm_backend_cuda_feature_ok(enum lm_backend_feature f)
{
	switch (f) {
	case LM_FEATURE_ATTN_SINKS:
		return LMC_HAS_ATTN_SINKS;
	case LM_FEATURE_ROPE_YARN:
		return LMC_HAS_ROPE_YARN;
	case LM_FEATURE_SWIGLU_OAI:
		return LMC_HAS_SWIGLU_OAI;
	default:
		return false;
	}
}
