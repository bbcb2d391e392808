/* wire.h — the layermesh protocol between the coordinator and the workers.
 *
 * One NNG message = a msgpack map (the header) immediately followed by the raw payload bytes.
 * Hidden states are never packed into msgpack: the header says the payload's dtype, width and
 * byte count, and the payload is the rows themselves, so a middle worker can compute into the
 * received message's payload in place and forward the same message to its successor.
 *
 * Planes.
 *   data ring    coordinator PUSH -> w0 PULL, w0 PUSH -> w1 PULL, ..., wN PUSH -> coordinator
 *                PULL. Carries FORWARD (token ids into w0, hidden states between workers),
 *                TOKENS (sampled ids, from the last worker), RELEASE and COPY (each passes
 *                every worker in order, then returns to the coordinator as its
 *                acknowledgement) and ERROR (a
 *                worker that cannot process a ring message sends ERROR down the ring instead,
 *                and every later worker forwards it untouched).
 *   control      coordinator REQ -> each worker's REP. HELLO, ASSIGN/READY, STATUS, DRAIN,
 *                PAUSE/RESUME, REPOINT, KV_EXPORT/KV_IMPORT, each answered by the same type
 *                or by ERROR.
 *
 * Header keys (all maps use short string keys; unknown keys are errors):
 *   "v"  u32  protocol version, WIRE_VERSION          every message
 *   "t"  u32  enum wire_type                          every message
 *   "fp" u64  model fingerprint (gguf_fingerprint)    every message but HELLO requests, ASSIGN
 *                                                     (no model yet) and ERROR (it reports
 *                                                     mismatches, so it must not be subject to one)
 *   "id" u64  batch or request id, echoed in replies  every message
 *   further keys per type, documented at each struct below.
 * Keys may come in any order; each at most once. Integers may use any msgpack integer encoding
 * whose value fits the field; floats may be float32 or float64; strings are str (not bin), at
 * most the struct field's size - 1 bytes and NUL-free. "pl" is present exactly when a payload
 * may follow, and the message's length must be the header's plus "pl"; a message without "pl"
 * ends with its header.
 *
 * Rollback (version 3). A FORWARD's first position for a sequence is the length that
 * sequence's cache must hold: every stage truncates the slot to it, on every layer type, before
 * it stores the batch's rows (engine/forward.c). That is how a speculative draft the last stage
 * rejected is undone everywhere, and it needs no message of its own. The FORWARD passes every
 * stage in ring order and each applies the truncation before it computes and forwards, so the
 * TOKENS the coordinator gets back for the batch is the whole ring's acknowledgement that every
 * stage rolled back; a stage that cannot (a sliding ring that no longer holds the rows the
 * rolled-back sequence reads) refuses the batch, and the ERROR that comes back instead is as
 * explicit a negative answer. A separate broadcast (prima.cpp's seq_rm) would need
 * acknowledgements of its own and could race the next batch on another socket; carried by the
 * FORWARD, the rollback is ordered with the rows it replaces by construction.
 *
 * Compatibility. WIRE_VERSION changes whenever any header key, type value or payload layout
 * changes; the static_asserts in wire.c pin the type values so such a change cannot go
 * unnoticed. HELLO's layout never changes, so any two builds can at least tell each other their
 * versions: a mismatch is refused with an ERROR naming both values. One key is the exception:
 * FORWARD's and TOKENS' optional "ts" (the ring stamp, below), which no message carries unless
 * the coordinator was told to stamp (mesh.toml's [coordinator] ring_stamps): a mesh that does
 * not stamp sends exactly what builds without it send, so they interoperate; a build that does
 * not know the key drops a stamped message as malformed, as it does any unknown key, naming
 * it in its log (its batch then makes no progress).
 *
 * Ring stamp ("ts", u64, always the fixed 9-byte 0xcf form and the header's last key, so that
 * its 8 value bytes end the header). The CLOCK_MONOTONIC nanoseconds (lm_now_ns) at which the
 * sender handed the message to its socket: the ring's processes share one machine's clock, so
 * the receiver's arrival time minus it is the hop's transit. The coordinator stamps its FORWARDs
 * when told to; a worker stamps what it sends on when what it received was stamped, rewriting
 * the 8 bytes in place just before it sends (wire_stamp). A stamp from another machine's clock
 * means nothing: receivers only observe differences that are not negative.
 *
 * Trust. Every received header is untrusted: types, ranges and the payload length are checked
 * against struct wire_limits (the receiver's model and cache) before anything is used. A
 * malformed message yields LM_EPROTO (LM_EVERSION, LM_EFINGERPRINT for those mismatches) and a
 * message naming the field; it never aborts the receiver.
 */
#ifndef LM_WIRE_H
#define LM_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/sampling.h"
#include "common/base/dtype.h"

#define WIRE_VERSION_CURRENT 6
/* A test build may claim another version (tests/integration: a redeploy of a build that speaks
 * another protocol must be refused at HELLO, both versions named). */
#ifdef LM_TEST_WIRE_VERSION
#define WIRE_VERSION LM_TEST_WIRE_VERSION
#else
#define WIRE_VERSION WIRE_VERSION_CURRENT
#endif

/* Values are part of the protocol: never renumber (wire.c pins them). */
enum wire_type {
	WIRE_HELLO = 1,
	WIRE_ASSIGN = 2,
	WIRE_READY = 3,
	WIRE_FORWARD = 4,
	WIRE_TOKENS = 5,
	WIRE_RELEASE = 6,
	WIRE_DRAIN = 7,
	WIRE_KV_EXPORT = 8,
	WIRE_KV_IMPORT = 9,
	WIRE_STATUS = 10,
	WIRE_ERROR = 11,
	WIRE_PAUSE = 12,
	WIRE_RESUME = 13,
	WIRE_REPOINT = 14,
	WIRE_TRACE = 15,
	WIRE_COPY = 16, /* version 5 */
	WIRE_TYPE_MAX = 16,
};

enum wire_dtype {
	WIRE_DT_NONE = 0, /* no payload */
	WIRE_DT_I32 = 1,  /* token ids, into the first worker */
	WIRE_DT_F32 = 2,  /* hidden states */
	WIRE_DT_F16 = 3,  /* hidden states, halved on the wire */
	WIRE_DT_BF16 = 4,
	WIRE_DT_RAW = 5, /* opaque bytes (KV rows) */
};

/* The most bytes of grammar text one sequence's "gr" entry carries (common/grammar/gbnf.h's
 * GBNF_MAX_TEXT: engine/constrain.c holds the two equal). */
#define WIRE_MAX_GRAMMAR (256 * 1024)

/* The most top-logprob alternatives a TOKENS message carries per token. */
#define WIRE_MAX_LOGPROBS 20

/* Bytes per element of a dtype (0 for NONE and RAW). */
size_t wire_dtype_size(enum wire_dtype dt);
/* "i32", "f32", "f16", "bf16", "raw" or "none". */
const char *wire_dtype_name(enum wire_dtype dt);
/* The wire dtype of hidden states stored as t (f32, f16, bf16); WIRE_DT_NONE for any other. */
enum wire_dtype wire_dtype_of(enum lm_dtype t);
/* The element type of a wire dtype (LM_I32 for token ids); LM_DTYPE_COUNT for NONE and RAW. */
enum lm_dtype wire_dtype_elem(enum wire_dtype dt);
const char *wire_type_name(uint32_t t);

/* What the receiver can accept; decoding checks every field against it. */
struct wire_limits {
	uint64_t fingerprint; /* 0: do not check (a coordinator before HELLO) */
	int32_t slots;        /* KV slots: a sequence's slot must be < slots */
	int32_t max_seq;      /* positions per sequence */
	int32_t dim;          /* hidden width (n_embd) */
	int32_t n_vocab;      /* token ids must be < n_vocab */
	int32_t max_batch;    /* tokens per FORWARD */
	int32_t max_seqs;     /* sequences per FORWARD or TOKENS */
	int32_t max_logprobs; /* top logprobs a sequence may ask for */
	int32_t max_draft;    /* drafted tokens a sequence may carry (0: no speculation) */
};

/* One sequence's part of a FORWARD batch: rows [row, row + n_tokens) of the payload are its
 * tokens at positions [pos, pos + n_tokens) in KV slot `slot`, where row is the sum of the
 * n_tokens of the sequences before it. On the wire each is a 13-element array, in this order:
 *   [seq_id u64, slot i32, pos i32, n_tokens i32, sample bool, step u64, n_logprobs i32,
 *    temperature f32, top_k i32, top_p f32, min_p f32, seed u64, n_draft i32]
 * A speculating sequence sends its last accepted token followed by n_draft drafted ones
 * (n_tokens = n_draft + 1); the last stage verifies them (see TOKENS). Decoding checks
 * 0 <= slot < slots, pos >= 0, n_tokens >= 1, pos + n_tokens <= max_seq,
 * 0 <= n_logprobs <= max_logprobs, lm_sampling_check() (on every sequence, sampled or not: the
 * coordinator sends each request's parameters), 0 <= n_draft <= min(n_tokens - 1, max_draft),
 * sample true when n_draft > 0, and that no two sequences of one batch share a slot. */
struct wire_seq {
	uint64_t seq_id; /* the coordinator's id, echoed in TOKENS */
	int32_t slot;
	int32_t pos;
	int32_t n_tokens;
	bool sample;        /* last worker: sample after the last row (false mid-prefill) */
	uint64_t step;      /* generation step: the sampler's draw index */
	int32_t n_logprobs; /* top logprobs wanted with the sampled token (0: none) */
	struct lm_sampling sampling;
	/* Logit bias and penalties before sampling (FORWARD's "adj", version 3); NULL: none.
	 * Encode: the caller's; decode: points into the scratch. */
	const struct lm_logit_adjust *adjust;
	int32_t n_draft; /* its last n_draft tokens are drafts to verify (0: none) */
	/* The grammar its output is held to (FORWARD's "gr", version 6); NULL: none. Encode: the
	 * caller's; decode: points into the message and the scratch. */
	const struct wire_grammar *grammar;
};

/* A constrained sequence's part of "gr" (docs/constrained-decoding.md). With text (len > 0),
 * the last stage (re)builds the sequence's matcher: it compiles the GBNF and advances it over
 * ids, the n_ids = step tokens the sequence has generated so far. Without (len 0, n_ids 0), it
 * continues from the matcher it holds for the slot, which must be this sequence's, advanced
 * over exactly `step` tokens; else it refuses the batch, and the coordinator sends the text
 * again. text is not NUL-terminated. */
struct wire_grammar {
	const char *text;
	uint32_t len;
	const int32_t *ids;
	int32_t n_ids;
};

/* FORWARD: "seqs" (array of per-sequence arrays), "n" (total tokens), "dt" (wire_dtype),
 * "dim" (row width; 1 for I32 ids), "pl" (payload bytes), "dr" (the drafted ids, i32, of
 * every speculating sequence in order: the ids of its rows 1 .. n_draft, which stages past the
 * first see only as hidden states; present exactly when some n_draft > 0) and "adj" when any
 * sequence has logit adjustments: an array of
 *     [index i32, presence f32, frequency f32, repeat f32, [window ids i32...],
 *      [[id i32, bias f32]...]]
 * one per such sequence, `index` its place in "seqs" (ascending, each at most once), checked
 * with lm_logit_adjust_check against n_vocab. "gr" (version 6) when any sequence is held to a
 * grammar: an array of [index i32, text str, [ids i32...]], one per such sequence (struct
 * wire_grammar; index ascending, the sequence sampling, text at most WIRE_MAX_GRAMMAR bytes
 * without NUL, ids empty without text and exactly `step` of them with it, each in
 * [0, n_vocab)). payload_len must equal
 * n x dim x wire_dtype_size(dt). Sequences' rows are in order and cover [0, n).
 * Decoding checks 1 <= n_seqs <= max_seqs, 1 <= n <= max_batch, dt one of I32 (dim 1, every
 * id in [0, n_vocab)), F32, F16, BF16 (dim == limits' dim), and "dr" holding the sum of the
 * n_draft, each in [0, n_vocab). "ts" optional: the ring stamp (see the top). */
struct wire_forward {
	uint64_t batch_id;
	uint64_t fingerprint;
	int32_t n_seqs;
	struct wire_seq *seqs; /* [n_seqs] */
	int32_t n_drafts;      /* sum of the sequences' n_draft */
	const int32_t *drafts; /* [n_drafts]: decode: in scratch; encode: the caller's */
	int32_t n_tokens;
	enum wire_dtype dtype;
	int32_t dim;
	const void *payload; /* decode: points into the message; encode: copied in */
	size_t payload_len;
	/* "ts", the ring stamp (0: absent). Encode: any non-zero value writes the key, as the
	 * header's last 9 bytes, for the sender to overwrite with wire_stamp. Decode: the value,
	 * and stamp_at, the offset in the message of its 8 value bytes (0 when absent). */
	uint64_t sent_ns;
	size_t stamp_at;
};

/* TOKENS: "toks" (array of per-sequence arrays), "pl". Logprobs travel in the payload as f32/i32
 * pairs so the header stays small: for each token with n_top > 0, n_top ids (i32) then n_top
 * logprobs (f32), in order, little-endian; so "pl" = 8 x the sum of n_top. Each token is a
 * 4-element array [seq_id u64, token i32, logprob f32, n_top i32]. A sampling sequence gets one
 * token; a speculating one 1 + a consecutive entries, a <= n_draft: the a drafts the last stage
 * accepted, in order, then the token it sampled after them (the correction of the first
 * rejected draft, or the next token when all were accepted), so a is how many were accepted
 * and the sequence's next FORWARD starts at pos + 1 + a, which rolls every stage back.
 * Decoding checks 0 <= n <= max_batch, ids (sampled and top) in [0, n_vocab), logprobs not NaN
 * and <= 0, 0 <= n_top <= max_logprobs; the coordinator checks the entries against what it sent.
 * An empty TOKENS acknowledges a batch where nothing sampled. "ts" optional: the ring stamp. */
struct wire_token {
	uint64_t seq_id;
	int32_t token;
	float logprob; /* log-probability of `token` under the model */
	int32_t n_top; /* top alternatives in the payload */
};
struct wire_tokens {
	uint64_t batch_id;
	uint64_t fingerprint;
	int32_t n;
	struct wire_token *toks; /* [n] */
	const void *payload;     /* top logprobs as described above */
	size_t payload_len;
	uint64_t sent_ns; /* "ts", as FORWARD's (decode: its value; 0: absent) */
};

/* HELLO request (coordinator -> worker): only "v", "t", "id". HELLO reply (worker ->
 * coordinator): "name", "build", "fp", "slice" [begin, end, embedding, head] or absent before
 * ASSIGN, "pid". The version check happens on HELLO: a mismatch gets ERROR naming both.
 * Anyone who can connect may ask HELLO, so since version 4 the reply's "fp" is not the model's
 * fingerprint but wire_hello_proof(fingerprint, the request's id): the coordinator, which
 * knows the fingerprint, checks it; a stranger learns nothing it could put in a FORWARD.
 * The decoder takes a message with none of the reply keys as a request (name and build empty,
 * pid 0); with any of them, "name", "build", "fp" and "pid" (> 0) are all required. A slice is
 * layers [begin, end) with 0 <= begin <= end, not empty unless it has the embedding or head. */
struct wire_hello {
	uint32_t version; /* decode: the peer's (also filled on LM_EVERSION); encode: ignored,
			   * WIRE_VERSION is written */
	uint64_t id;
	uint64_t fingerprint; /* 0 before the model is loaded */
	char name[64];
	char build[64];
	int32_t pid;
	bool has_slice;
	int32_t begin, end;
	bool embedding, head;
};

/* ASSIGN (coordinator -> worker): the slice and everything the worker needs to load it:
 * "model" (path), "slice" [begin, end, embedding, head], "seq" (max_seq), "slots", "kvk" and
 * "kvv" (lm_dtype of K and V of the global layers), "kks" and "kvs" (of the sliding-window
 * layers), "wdt" (wire dtype of hidden states), "batch" (max tokens per FORWARD), "drf" (max
 * drafted tokens a sequence carries), "next" (successor's data address, the coordinator's for
 * the last worker). Decoding checks model and next non-empty, the slice as HELLO's, seq, slots
 * and batch >= 1, 0 <= drf < batch, kvk, kvv, kks and kvs types that common/base/dtype.h knows
 * (whether the cache takes them is the worker's to say), wdt one of F32, F16, BF16.
 * READY (reply): "fp", "kvb" (KV bytes), "wb" (weight bytes), "rss" (resident bytes), "dig"
 * (the digest of the slice's tensor bytes as the worker loaded them, gguf_tensor_digest; the
 * coordinator holds every later join of the slice to it). */
struct wire_assign {
	uint64_t id;
	char model[1024];
	int32_t begin, end;
	bool embedding, head;
	int32_t max_seq, slots;
	uint32_t k_type, v_type;         /* enum lm_dtype: global layers */
	uint32_t k_type_swa, v_type_swa; /* enum lm_dtype: sliding-window layers */
	enum wire_dtype wire_dtype;
	int32_t max_batch;
	int32_t max_draft;
	char next[256];
};
struct wire_ready {
	uint64_t id;
	uint64_t fingerprint;
	uint64_t kv_bytes, weight_bytes, rss_bytes;
	uint64_t digest;
};

/* RELEASE: "slots" (array of slot numbers to empty; at most limits' slots of them, each in
 * [0, slots)). */
struct wire_release {
	uint64_t id;
	uint64_t fingerprint;
	int32_t n;
	int32_t *slots; /* [n] */
};

/* COPY (version 5): "slot" (the source, in [0, slots)), "slots" (the destinations, as RELEASE's;
 * at least one) and "len" (positions, in [1, max_seq]). Every stage makes each destination hold
 * the source's first len positions on every layer it holds (kv_cache_copy), then passes the
 * message on; it comes back to the coordinator as its acknowledgement. Parallel samples of one
 * prompt compute it once and copy its rows (coordinator/sched/scheduler.h). Ordered on the ring
 * with the FORWARDs around it, as RELEASE is: a destination's next FORWARD, sent after the COPY,
 * finds the rows on every stage. A stage that cannot copy (its source holds fewer positions)
 * sends ERROR down the ring; the destinations' FORWARDs are then refused and recompute. */
struct wire_copy {
	uint64_t id;
	uint64_t fingerprint;
	int32_t src;
	int32_t len;
	int32_t n;
	int32_t *dst; /* [n]: decode: in scratch; encode: the caller's */
};

/* ERROR: "code" (LM_E* value, i64; negative, fits int32), "msg" (string), "about" (the type of
 * the failed message, u32; any value, since the failed message may be of a type this build does
 * not know). */
struct wire_error {
	uint64_t id;
	int32_t code;
	uint32_t about;
	char msg[512];
};

/* KV_EXPORT request: "slot". KV_EXPORT reply and KV_IMPORT request: "slot", "len" (positions),
 * "hi" (one past the highest position written: the high-water mark a rejected draft leaves in
 * a ring, engine/kv_cache.h; absent means len), "dt" = WIRE_DT_RAW, "pl" (payload bytes) and
 * the rows as kv_cache_export() lays them out, in the cache's own types, bit for bit.
 * KV_IMPORT reply: a plain ack. "len", "dt" and "pl" are all present or all absent (absent: len
 * 0, no payload); the encoder writes the short form for a KV_EXPORT with len 0 and no payload,
 * and "hi" only where it is above len. Decoding checks 0 <= slot < slots, 0 <= len <= max_seq
 * and len <= hi <= max_seq; the receiver checks the payload size against its cache's layout
 * (kv_cache_export_bytes). */
struct wire_kv {
	uint64_t id;
	uint64_t fingerprint;
	int32_t slot;
	int32_t len;
	int32_t hi; /* >= len; encode: 0 means len */
	const void *payload;
	size_t payload_len;
};

/* TRACE (version 2; for `layermesh diff`) uses the KV_EXPORT layout. Request ("slot" only): arm
 * tracing of slot `slot` and answer with what was recorded since it was last armed. Reply
 * ("slot", "len", "dt" = RAW, "pl"): `len` token rows, and the payload the hidden state after
 * each of the worker's layers for those rows, f32 little-endian, [layers][len][dim] in layer
 * order; the receiver knows the worker's slice and the model's width. Tracing costs a copy of
 * the residual stream per layer, only for an armed slot. */

/* REPOINT request: "next" (the new successor address, non-empty). Reply: a plain ack. */
struct wire_repoint {
	uint64_t id;
	uint64_t fingerprint;
	char next[256];
};

/* STATUS reply: "dt" = WIRE_DT_RAW, "pl" and a JSON document (the worker's /status) as
 * payload. Plain acks and header-only requests (DRAIN, PAUSE, RESUME, STATUS requests; KV_IMPORT
 * and REPOINT replies) carry "v", "t", "fp", "id" only. */

/* The largest data-ring message (FORWARD, TOKENS, RELEASE or ERROR) a receiver with these limits
 * can accept, header included: a bound on what one ring message may cost it. Receivers cap
 * their sockets' NNG_OPT_RECVMAXSZ at it, so a frame that announces more is refused before
 * anything is allocated for it. (test_wire holds it above the largest legal messages.) */
size_t wire_max_data_message(const struct wire_limits *lim);

/* Data-ring messages a worker holds at once, at most: WIRE_RING_QUEUED taken off its PULL socket
 * and waiting to be computed (worker/recvq.h), the one it computes and the one it sends. Further
 * messages wait inside NNG, so backpressure reaches the predecessor. A property of the ring, not
 * of one process: the worker sizes its receive queue by it and the planner prices a stage's
 * messages by it (engine/scratch.c), and neither may include the other's headers. */
#define WIRE_RING_QUEUED 8
#define WIRE_RING_HELD   (WIRE_RING_QUEUED + 2)

/* ------------------------------------------------------------------ decoding */

/* The fixed part every header has; enough to dispatch. */
struct wire_head {
	uint32_t version;
	uint32_t type;
	uint64_t fingerprint; /* 0 when absent */
	uint64_t id;
	size_t header_len; /* bytes of the msgpack map; the payload starts here */
};

/* Decoding scratch: arrays of sequences/tokens/slots are carved from it, so a decoded message
 * costs no malloc. Sized from the limits once. */
struct wire_scratch {
	struct wire_seq *seqs;
	struct wire_token *toks;
	int32_t *slots;
	/* For FORWARD's "adj", allocated at the first message that has one (most receivers
	 * never see one, and these are the large arrays): */
	struct lm_logit_adjust *adj; /* [cap] */
	int32_t *hist;               /* [cap][LM_MAX_PENALTY_WINDOW] */
	struct lm_logit_bias *bias;  /* [cap][LM_MAX_LOGIT_BIAS] */
	int32_t *drafts;
	/* For FORWARD's "gr", allocated at the first message that has one: */
	struct wire_grammar *gr; /* [cap] */
	int32_t *gr_ids;         /* [gr_ids_cap] every entry's ids */
	size_t gr_ids_cap;
	int32_t cap;  /* sequences and slots */
	int32_t rows; /* TOKENS entries and drafted ids: one per row of a batch at most */
};
/* cap sequences (and slots), and as many TOKENS entries and drafted ids. */
int wire_scratch_init(struct wire_scratch *s, int32_t cap);
/* cap sequences, `rows` (>= cap) TOKENS entries and drafted ids: size it (max(max_seqs, slots),
 * max_batch) for the receiver of speculative batches. */
int wire_scratch_init_rows(struct wire_scratch *s, int32_t cap, int32_t rows);
/* The bytes wire_scratch_init_rows(cap, rows) allocates (the "adj" arrays, allocated later and
 * only for a message that has one, are not counted): what a stage and its estimate count. */
uint64_t wire_scratch_bytes(int32_t cap, int32_t rows);
void wire_scratch_fini(struct wire_scratch *s);

/* Peeks at the version, type, fingerprint and id of a message of `len` bytes. Checks the
 * version (LM_EVERSION, message naming both; version, type and id are filled when present, so
 * the ERROR reply can echo the id) but not the fingerprint. The whole map must be well-formed
 * msgpack; keys other than these four are skipped unchecked (the full decoders check them). */
int wire_peek(const void *buf, size_t len, struct wire_head *h, lm_diag *d);

/* A header-only message ("v", "t", "fp", "id" and nothing after the map) of a type that has
 * one: DRAIN, PAUSE, RESUME and STATUS requests and the plain acks (DRAIN, PAUSE, RESUME,
 * KV_IMPORT, REPOINT). The fingerprint is checked when lim is not NULL and lim->fingerprint is
 * not 0. */
int wire_decode_simple(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_head *h, lm_diag *d);

/* Full decoders: every field checked against lim (fingerprint included when lim->fingerprint
 * is not 0: LM_EFINGERPRINT naming both values). Pointers in the result point into buf or
 * scratch; they live as long as both. A decoded payload pointer is NULL when payload_len is 0
 * and is not aligned in general (read rows with memcpy or copy them out). Counts are also
 * bounded by the scratch's cap: size it max(max_seqs, slots) to accept every legal message.
 * On failure the output struct is unspecified. */
int wire_decode_forward(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_forward *f, lm_diag *d);
int wire_decode_tokens(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_scratch *s, struct wire_tokens *t, lm_diag *d);
int wire_decode_release(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_release *r, lm_diag *d);
int wire_decode_copy(const void *buf, size_t len, const struct wire_limits *lim,
		     struct wire_scratch *s, struct wire_copy *c, lm_diag *d);
int wire_decode_hello(const void *buf, size_t len, struct wire_hello *h, lm_diag *d);
/* What a HELLO reply's "fp" carries for a model of `fingerprint` asked with request id `id`:
 * SipHash-2-4 of id keyed by the fingerprint (never 0), or 0 for fingerprint 0 (no model). */
uint64_t wire_hello_proof(uint64_t fingerprint, uint64_t id);
/* SipHash-2-4 of msg[len] under the 128-bit key (k0, k1), as its authors' reference computes it
 * (key bytes little-endian: k0 holds bytes 0..7). */
uint64_t wire_siphash24(uint64_t k0, uint64_t k1, const void *msg, size_t len);
int wire_decode_assign(const void *buf, size_t len, struct wire_assign *a, lm_diag *d);
int wire_decode_ready(const void *buf, size_t len, struct wire_ready *r, lm_diag *d);
int wire_decode_error(const void *buf, size_t len, struct wire_error *e, lm_diag *d);
/* KV_EXPORT request (payload empty), KV_EXPORT reply and KV_IMPORT request. */
int wire_decode_kv(const void *buf, size_t len, const struct wire_limits *lim, struct wire_kv *k,
		   lm_diag *d);
int wire_decode_repoint(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_repoint *r, lm_diag *d);
/* The raw payload of a message with only "v", "t", "fp", "id", "dt" = RAW and "pl" (STATUS
 * replies), of any known type; the fingerprint is not checked. */
int wire_decode_raw(const void *buf, size_t len, const void **payload, size_t *payload_len,
		    lm_diag *d);

/* The ring stamp: writes ns as the 8 big-endian value bytes of a "ts" key at `at` (the last 8
 * bytes of a header encoded with a non-zero sent_ns, or a decoded stamp_at). */
void wire_stamp(void *at, uint64_t ns);
#define WIRE_STAMP_LEN 8

/* ------------------------------------------------------------------ encoding
 *
 * Encoders append to a growable byte buffer (reused across messages: no allocation once it has
 * grown). The caller moves the bytes into an nng_msg. For FORWARD the payload is not copied by
 * the encoder when payload is NULL: the caller appends payload_len bytes itself (so hidden
 * states can be written straight into the message). The other encoders with a payload (TOKENS,
 * KV, raw) treat a NULL payload the same way.
 *
 * Every encoder appends one message (call wire_buf_reset between messages), writes
 * WIRE_VERSION, and returns 0, LM_EINVAL for a struct that is not self-consistent (a negative
 * count, a NULL array, a string not terminated within its field, a payload_len other than the
 * header implies, a type the function does not encode) or LM_ENOMEM; on failure b->len is
 * what it was. Ranges against a receiver's limits are the decoder's business, not checked
 * here. */
struct wire_buf {
	uint8_t *data;
	size_t len, cap;
};
void wire_buf_reset(struct wire_buf *b);
void wire_buf_fini(struct wire_buf *b);

int wire_encode_forward(struct wire_buf *b, const struct wire_forward *f);
int wire_encode_tokens(struct wire_buf *b, const struct wire_tokens *t);
int wire_encode_release(struct wire_buf *b, const struct wire_release *r);
int wire_encode_copy(struct wire_buf *b, const struct wire_copy *c);
int wire_encode_hello(struct wire_buf *b, const struct wire_hello *h, bool reply);
int wire_encode_assign(struct wire_buf *b, const struct wire_assign *a);
int wire_encode_ready(struct wire_buf *b, const struct wire_ready *r);
int wire_encode_error(struct wire_buf *b, const struct wire_error *e);
int wire_encode_kv(struct wire_buf *b, enum wire_type t, const struct wire_kv *k);
int wire_encode_repoint(struct wire_buf *b, const struct wire_repoint *r);
/* Header-only control messages (STATUS, DRAIN, PAUSE, RESUME requests and their plain acks;
 * KV_IMPORT and REPOINT acks); LM_EINVAL for another type. */
int wire_encode_simple(struct wire_buf *b, enum wire_type t, uint64_t id, uint64_t fingerprint);
/* A header with "dt" = RAW and "pl" followed by payload bytes (STATUS replies). */
int wire_encode_raw(struct wire_buf *b, enum wire_type t, uint64_t id, uint64_t fingerprint,
		    const void *payload, size_t payload_len);

#endif
