/* layermesh diff — the mesh against the single process, layer by layer.
 *
 * Runs one prompt through the whole model in this process, capturing the hidden state (the
 * residual stream) after every layer, and through a private mesh cut as mesh.toml's plan cuts
 * it: real layermesh-worker processes on ipc sockets in a temporary directory, each asked to
 * record its layers' hidden states for the prompt (TRACE). Prints each layer's max-abs and
 * relative error and the first layer past the tolerance. With --external DIR it also compares
 * against another implementation's dump (DIR/layer_N.f32, raw f32 [rows][n_embd], and
 * DIR/meta.txt, as tests/oracle/lm_oracle --dump-layers writes them).
 *
 * The private mesh never touches mesh.toml's addresses, so diff runs beside a live mesh.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/config/mesh_config.h"
#include "common/tok/tokenizer.h"
#include "common/wire/wire.h"
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "coordinator/plan/planner.h"
#include "engine/engine.h"
#include "coordinator/supervise/ctl.h"
#include "coordinator/supervise/worker_cmd.h"

extern char **environ;

static const char diff_usage[] =
	"usage: layermesh diff [mesh.toml] --prompt TEXT [options]\n"
	"\n"
	"Runs the prompt through the whole model in this process and through a private mesh cut\n"
	"as mesh.toml's plan cuts it (real workers on ipc sockets in a temporary directory), and\n"
	"prints, for every layer, the max-abs and relative error of the mesh's hidden state\n"
	"against the single process's, and the first layer past the tolerance.\n"
	"\n"
	"  --prompt TEXT      the prompt\n"
	"  --prompt-ids IDS   the prompt as token ids (\"1 2 3\", used as given)\n"
	"  --tolerance T      max-abs error allowed per layer (default 1e-4)\n"
	"  --external DIR     also compare with DIR/layer_N.f32 (raw f32 [rows][n_embd]) and\n"
	"                     DIR/meta.txt, e.g. from tests/oracle/lm_oracle --dump-layers DIR;\n"
	"                     one row compares the last prompt token, n_prompt rows every token\n"
	"  --worker-bin PATH  the worker program (default: layermesh-worker beside layermesh)\n"
	"  -h, --help         this text\n"
	"\n"
	"Exit status: 0 when every layer is within the tolerance, 1 when one is not or on error.\n";

struct diff_worker {
	pid_t pid;
	struct ctl_conn ctl;
	char ctl_addr[300], data_addr[300];
	int32_t begin, end;
};

struct diff_ctx {
	struct mesh_config cfg;
	struct fence_plan plan;
	struct lm_engine eng; /* the single process */
	int32_t n_layer, dim, n;
	int32_t *ids;
	float *ref;  /* [n_layer][n][dim]: the single process */
	float *mesh; /* [n_layer][n][dim]: the workers' traces */
	int32_t ref_token, mesh_token;
	char dir[256];
	struct diff_worker *w;
	int32_t n_workers;
	nng_socket push, pull;
	bool push_open, pull_open;
};

/* The forward hook: after layer il, the residual stream of every row. */
static void diff_hook(void *arg, int32_t il, const float *x, int32_t n)
{
	struct diff_ctx *c = arg;
	c->eng.be.iface->download(c->eng.be.ctx, c->ref + (size_t)il * (size_t)n * (size_t)c->dim,
				  x, (size_t)n * (size_t)c->dim * sizeof(float));
}

static int diff_single(struct diff_ctx *c, lm_diag *d)
{
	/* Every layer in the types of the worker that holds it, as the mesh stores it. */
	struct kv_types *layer_kv = malloc((size_t)c->plan.n_layers * sizeof *layer_kv);
	if (layer_kv == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	planner_layer_kv_types(&c->cfg, &c->plan, layer_kv);
	struct lm_engine_cfg ec = {.model = c->cfg.model_path,
				   .bo = {.n_threads = 1},
				   .max_seq = c->n + 1,
				   .slots = 1,
				   .max_batch = c->n,
				   .kv_types = c->cfg.kv,
				   .layer_kv_types = layer_kv};
	int rc = lm_engine_open(&c->eng, &ec, d);
	free(layer_kv);
	if (rc != 0)
		return rc;
	const struct lm_hparams *hp = &c->eng.model.hp;
	c->n_layer = hp->n_layer;
	c->dim = hp->n_embd;
	size_t cells = (size_t)c->n_layer * (size_t)c->n * (size_t)c->dim;
	c->ref = calloc(cells, sizeof(float));
	c->mesh = calloc(cells, sizeof(float));
	float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
	struct lm_tok_loc *loc = malloc((size_t)c->n * sizeof *loc);
	if (c->ref == NULL || c->mesh == NULL || logits == NULL || loc == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	for (int32_t i = 0; i < c->n; i++)
		loc[i] = (struct lm_tok_loc){0, i};
	int32_t last = c->n - 1;
	struct lm_batch b = {.n = c->n, .ids = c->ids, .loc = loc, .n_out = 1, .out_rows = &last};
	c->eng.fw.hook = diff_hook;
	c->eng.fw.hook_arg = c;
	if ((rc = lm_forward_run(&c->eng.fw, &b, NULL, NULL, logits, d)) != 0)
		goto out;
	c->ref_token = 0;
	for (int32_t i = 1; i < hp->n_vocab; i++)
		if (logits[i] > logits[c->ref_token])
			c->ref_token = i;
out:
	free(logits);
	free(loc);
	return rc;
}

/* ------------------------------------------------------------------ the private mesh */

/* Starts the workers as `layermesh up` starts them (worker_cmd.h): they listen and wait for
 * their ASSIGN. */
static int diff_spawn(struct diff_ctx *c, const char *bin, lm_diag *d)
{
	for (int32_t j = 0; j < c->n_workers; j++) {
		struct diff_worker *w = &c->w[j];
		char name[16];
		snprintf(name, sizeof name, "diff%d", j);
		snprintf(w->ctl_addr, sizeof w->ctl_addr, "ipc://%s/w%d.ctl", c->dir, j);
		snprintf(w->data_addr, sizeof w->data_addr, "ipc://%s/w%d.data", c->dir, j);
		w->begin = c->plan.cuts[j];
		w->end = c->plan.cuts[j + 1];
		struct worker_cmd wc = {.bin = bin,
					.name = name,
					.control = w->ctl_addr,
					.data = w->data_addr,
					.threads = 1,
					.parent_pid = (int)getpid(),
					.log_level = "warn"};
		struct worker_argv args;
		worker_cmd_argv(&wc, &args);
		int rv = posix_spawn(&w->pid, bin, NULL, NULL, args.argv, environ);
		if (rv != 0)
			return lm_fail(d, LM_EOS, "cannot start %s: %s", bin, strerror(rv));
	}
	return 0;
}

/* Whether a diff worker's process still runs (for ctl's waits). */
static bool diff_alive(void *arg)
{
	struct diff_worker *w = arg;
	int status;
	if (w->pid > 0 && waitpid(w->pid, &status, WNOHANG) == w->pid)
		w->pid = 0;
	return w->pid > 0;
}

/* TRACE slot 0: arms it (the first time) or fetches what it recorded. */
static int diff_trace(struct diff_ctx *c, struct diff_worker *w, bool fetch, lm_diag *d)
{
	struct wire_limits lim = {
		.fingerprint = c->eng.model.fingerprint, .slots = 1, .max_seq = c->n + 1};
	int32_t rows = 0;
	void *data = NULL;
	size_t bytes = 0;
	int rc = ctl_trace(&w->ctl, c->eng.model.fingerprint, &lim, 0, &rows, &data, &bytes, d);
	if (rc == 0 && fetch) {
		size_t per_layer = (size_t)c->n * (size_t)c->dim;
		size_t want = (size_t)(w->end - w->begin) * per_layer * sizeof(float);
		if (rows != c->n || bytes != want)
			rc = lm_fail(
				d, LM_EPROTO,
				"worker [%d, %d) recorded %d rows (%zu bytes); expected %d (%zu)",
				w->begin, w->end, rows, bytes, c->n, want);
		else
			memcpy(c->mesh + (size_t)w->begin * per_layer, data, want);
	}
	free(data);
	return rc;
}

static int diff_mesh(struct diff_ctx *c, const char *bin, lm_diag *d)
{
	char addr[300];
	int rc;
	snprintf(addr, sizeof addr, "ipc://%s/coord.data", c->dir);
	if (nng_pull0_open(&c->pull) != 0 ||
	    (c->pull_open = true, nng_listen(c->pull, addr, NULL, 0)) != 0)
		return lm_fail(d, LM_EIO, "cannot listen at %s", addr);
	if ((rc = diff_spawn(c, bin, d)) != 0)
		return rc;
	/* Each worker, as the mesh's keepers do it: HELLO until it answers, ASSIGN its slice of
	 * mesh.toml's plan for one sequence of the prompt, READY; then arm its trace. */
	for (int32_t j = 0; j < c->n_workers; j++) {
		struct diff_worker *w = &c->w[j];
		struct wire_hello hello;
		struct wire_assign a;
		struct wire_ready ready;
		planner_assignment(&c->cfg, &c->plan, j, c->n + 1, 1,
				   j + 1 < c->n_workers ? c->w[j + 1].data_addr : addr, &a);
		a.max_batch = c->n;
		if ((rc = ctl_open(&w->ctl, c->plan.stages[j].name, w->ctl_addr, d)) != 0 ||
		    (rc = ctl_hello_wait(&w->ctl, 0, &hello, 60000, diff_alive, w, d)) != 0 ||
		    (rc = ctl_assign(&w->ctl, &a, c->eng.model.fingerprint, &ready, 60000,
				     diff_alive, w, d)) != 0 ||
		    (rc = diff_trace(c, w, false, d)) != 0)
			return rc;
	}
	/* The prompt as one FORWARD into the first worker; the TOKENS come back here. */
	if (nng_push0_open(&c->push) != 0 ||
	    (c->push_open = true, nng_dial(c->push, c->w[0].data_addr, NULL, NNG_FLAG_NONBLOCK)) !=
		    0)
		return lm_fail(d, LM_EIO, "cannot dial the first worker");
	nng_socket_set_ms(c->push, NNG_OPT_SENDTIMEO, 10000);
	nng_socket_set_ms(c->pull, NNG_OPT_RECVTIMEO, 60000);
	struct wire_seq seq = {.seq_id = 1,
			       .slot = 0,
			       .pos = 0,
			       .n_tokens = c->n,
			       .sample = true,
			       .sampling = {.temperature = 0, .top_p = 1}};
	struct wire_forward f = {.batch_id = 1,
				 .fingerprint = c->eng.model.fingerprint,
				 .n_seqs = 1,
				 .seqs = &seq,
				 .n_tokens = c->n,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = c->ids,
				 .payload_len = (size_t)c->n * sizeof(int32_t)};
	struct wire_buf b = {0};
	nng_msg *m = NULL;
	rc = wire_encode_forward(&b, &f);
	if (rc == 0 && (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, b.data, b.len) != 0 ||
			nng_sendmsg(c->push, m, 0) != 0))
		rc = lm_fail(d, LM_EIO, "cannot send the prompt into the mesh");
	wire_buf_fini(&b);
	if (rc != 0)
		return rc;
	if (nng_recvmsg(c->pull, &m, 0) != 0)
		return lm_fail(d, LM_ETIMEOUT, "the mesh did not answer the prompt");
	struct wire_head h;
	struct wire_error e;
	if (wire_peek(nng_msg_body(m), nng_msg_len(m), &h, NULL) == 0 && h.type == WIRE_ERROR) {
		/* A worker refused the prompt (a non-finite hidden state, say): its own words. */
		rc = wire_decode_error(nng_msg_body(m), nng_msg_len(m), &e, d);
		nng_msg_free(m);
		if (rc != 0)
			return rc;
		return lm_fail(d, e.code < 0 ? e.code : LM_EPROTO, "%s", e.msg);
	}
	struct wire_limits lim = {.fingerprint = c->eng.model.fingerprint,
				  .slots = 1,
				  .max_seq = c->n + 1,
				  .dim = 1,
				  .n_vocab = c->eng.model.hp.n_vocab,
				  .max_batch = c->n,
				  .max_seqs = 1,
				  .max_logprobs = WIRE_MAX_LOGPROBS};
	struct wire_scratch s;
	struct wire_tokens t;
	wire_scratch_init(&s, 1);
	rc = wire_decode_tokens(nng_msg_body(m), nng_msg_len(m), &lim, &s, &t, d);
	if (rc == 0 && t.n == 1)
		c->mesh_token = t.toks[0].token;
	else if (rc == 0)
		rc = lm_fail(d, LM_EPROTO, "the mesh answered with %d tokens", t.n);
	else
		lm_diag_prefix(d, "the mesh's answer");
	wire_scratch_fini(&s);
	nng_msg_free(m);
	for (int32_t j = 0; rc == 0 && j < c->n_workers; j++)
		rc = diff_trace(c, &c->w[j], true, d);
	return rc;
}

static void diff_stop_mesh(struct diff_ctx *c)
{
	for (int32_t j = 0; c->w != NULL && j < c->n_workers; j++) {
		ctl_close(&c->w[j].ctl);
		if (c->w[j].pid > 0)
			kill(c->w[j].pid, SIGTERM);
	}
	for (int32_t j = 0; c->w != NULL && j < c->n_workers; j++)
		if (c->w[j].pid > 0)
			waitpid(c->w[j].pid, NULL, 0);
	if (c->push_open)
		nng_close(c->push);
	if (c->pull_open)
		nng_close(c->pull);
	char path[400];
	for (int32_t j = 0; j < c->n_workers; j++) {
		snprintf(path, sizeof path, "%s/w%d.ctl", c->dir, j);
		unlink(path);
		snprintf(path, sizeof path, "%s/w%d.data", c->dir, j);
		unlink(path);
	}
	snprintf(path, sizeof path, "%s/coord.data", c->dir);
	unlink(path);
	if (c->dir[0])
		rmdir(c->dir);
}

/* ------------------------------------------------------------------ comparing */

/* The first layer whose hidden state in the single process is not finite, or -1. */
static int32_t diff_first_nonfinite(const struct diff_ctx *c, const char **kind)
{
	size_t per = (size_t)c->n * (size_t)c->dim;
	for (int32_t l = 0; l < c->n_layer; l++) {
		const float *x = c->ref + (size_t)l * per;
		if (lm_all_finite(x, per))
			continue;
		*kind = "an infinity";
		for (size_t i = 0; i < per; i++)
			if (isnan(x[i]))
				*kind = "NaN";
		return l;
	}
	return -1;
}

/* max |a - b| and ||a - b|| / ||b|| over n floats. */
static void diff_err(const float *a, const float *b, size_t n, double *max_abs, double *rel)
{
	double m = 0, num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double e = (double)a[i] - (double)b[i];
		m = fmax(m, fabs(e));
		num += e * e;
		den += (double)b[i] * (double)b[i];
	}
	*max_abs = m;
	*rel = den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Reads DIR/layer_N.f32 for every layer; rows is 1 or n. */
static float *diff_read_external(const char *dir, int32_t n_layer, int32_t dim, int32_t n,
				 int32_t *rows, lm_diag *d)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/meta.txt", dir);
	FILE *fp = fopen(path, "r");
	int layers = 0, embd = 0, r = 0, prompt = 0;
	if (fp == NULL) {
		lm_fail(d, LM_ENOENT, "%s: %s", path, strerror(errno));
		return NULL;
	}
	int got =
		fscanf(fp, "n_layer %d n_embd %d rows %d n_prompt %d", &layers, &embd, &r, &prompt);
	fclose(fp);
	if (got != 4 || layers != n_layer || embd != dim || prompt != n || (r != 1 && r != n)) {
		lm_fail(d, LM_EFORMAT,
			"%s: the dump is of %d layers x %d, %d rows of a %d-token prompt; this "
			"model "
			"has %d layers x %d and the prompt %d tokens",
			path, layers, embd, r, prompt, n_layer, dim, n);
		return NULL;
	}
	size_t per = (size_t)r * (size_t)dim;
	float *ext = malloc((size_t)n_layer * per * sizeof(float));
	for (int32_t l = 0; ext != NULL && l < n_layer; l++) {
		snprintf(path, sizeof path, "%s/layer_%d.f32", dir, l);
		fp = fopen(path, "rb");
		size_t rd = fp ? fread(ext + (size_t)l * per, sizeof(float), per + 1, fp) : 0;
		if (fp)
			fclose(fp);
		if (rd != per) {
			lm_fail(d, LM_EFORMAT, "%s: expected %zu floats", path, per);
			free(ext);
			return NULL;
		}
	}
	*rows = r;
	return ext;
}

/* The table: each layer's error against the single process (and the external dump), the
 * first layer past the tolerance, the next tokens. Returns the exit status. */
static int diff_report(const struct diff_ctx *c, const float *ext, int32_t ext_rows, float tol)
{
	printf("prompt: %d tokens; fence", c->n);
	for (int32_t j = 0; j <= c->plan.n_workers; j++)
		printf("%s%d", j ? ", " : " [", c->plan.cuts[j]);
	printf("]; tolerance %g\n\n", (double)tol);
	printf("layer  worker  mesh max-abs   mesh rel%s\n",
	       ext != NULL ? "       external max-abs  external rel" : "");
	int32_t first_bad = -1;
	size_t per = (size_t)c->n * (size_t)c->dim;
	for (int32_t l = 0; l < c->n_layer; l++) {
		int32_t j = 0;
		while (l >= c->plan.cuts[j + 1])
			j++;
		double ma, rel;
		diff_err(c->mesh + l * per, c->ref + l * per, per, &ma, &rel);
		bool bad = !(ma <= tol);
		printf("%5d  %-6s  %12.3g  %9.3g", l, c->plan.stages[j].name, ma, rel);
		if (ext != NULL) {
			/* The external dump has every row, or the last prompt token's. */
			size_t rows = (size_t)ext_rows,
			       off = (size_t)(c->n - ext_rows) * (size_t)c->dim;
			double ema, erel;
			diff_err(c->ref + l * per + off, ext + (size_t)l * rows * (size_t)c->dim,
				 rows * (size_t)c->dim, &ema, &erel);
			printf("  %19.3g  %12.3g", ema, erel);
			bad |= !(ema <= tol);
		}
		printf("%s\n", bad ? "  <- past tolerance" : "");
		if (bad && first_bad < 0)
			first_bad = l;
	}
	printf("\nnext token: single process %d, mesh %d%s\n", c->ref_token, c->mesh_token,
	       c->ref_token == c->mesh_token ? "" : "  <- differ");
	if (first_bad >= 0)
		printf("first layer past tolerance: %d\n", first_bad);
	else
		printf("every layer within tolerance\n");
	return first_bad < 0 && c->ref_token == c->mesh_token ? 0 : 1;
}

/* The worker program: next to this one (installed), else the build tree's worker/. */
static const char *diff_default_bin(char *buf, size_t cap)
{
	char self[1024];
	ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
	self[k > 0 ? k : 0] = '\0';
	char *slash = strrchr(self, '/');
	if (slash != NULL)
		*slash = '\0';
	snprintf(buf, cap, "%s/layermesh-worker", self);
	if (access(buf, X_OK) != 0)
		snprintf(buf, cap, "%s/../worker/layermesh-worker", self);
	return buf;
}

/* The prompt's ids into c->ids and c->n: --prompt-ids as given, or --prompt tokenized with
 * the model's vocabulary (*vocab, which the caller frees). */
static int diff_prompt(struct diff_ctx *c, const char *prompt, const char *prompt_ids,
		       tok_vocab **vocab, lm_diag *d)
{
	gguf_file *f = NULL;
	size_t n = 0;
	int rc = gguf_open(c->cfg.model_path, &f, d);
	if (rc != 0)
		return rc;
	rc = tok_load(f, vocab, d);
	if (rc == 0 && prompt_ids != NULL)
		rc = lm_cli_ids(prompt_ids, tok_n_vocab(*vocab), &c->ids, &n, d);
	else if (rc == 0)
		rc = tok_encode_alloc(*vocab, prompt, strlen(prompt), tok_add_bos(*vocab), &c->ids,
				      &n, d);
	gguf_close(f);
	if (rc != 0)
		return rc;
	if (n == 0 || n > 512)
		return lm_fail(d, LM_EINVAL, "the prompt has %zu tokens (1 to 512 for a diff)", n);
	c->n = (int32_t)n;
	return 0;
}

/* The same prompt through a mesh of the plan's workers. *found: the mesh made a value that is
 * not finite, which is the finding itself (printed), not a failure of the diff. */
static int diff_run_mesh(struct diff_ctx *c, const char *bin, bool *found, lm_diag *d)
{
	snprintf(c->dir, sizeof c->dir, "/tmp/layermesh-diff.XXXXXX");
	if (mkdtemp(c->dir) == NULL) {
		c->dir[0] = '\0';
		return lm_fail(d, LM_EIO, "cannot make a temporary directory");
	}
	c->n_workers = c->plan.n_workers;
	c->w = calloc((size_t)c->n_workers, sizeof *c->w);
	if (c->w == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	int rc = diff_mesh(c, bin, d);
	if (rc == LM_ENONFINITE) {
		printf("the mesh: %s\n", d->msg);
		*found = true;
		return 0;
	}
	return rc;
}

int cmd_diff(int argc, char **argv)
{
	static const struct option opts[] = {
		{"prompt", required_argument, NULL, 'p'},
		{"prompt-ids", required_argument, NULL, 'I'},
		{"tolerance", required_argument, NULL, 't'},
		{"external", required_argument, NULL, 'e'},
		{"worker-bin", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *config = "mesh.toml", *prompt = NULL, *prompt_ids = NULL, *external = NULL,
		   *bin = NULL;
	float tol = 1e-4f;
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			prompt = optarg;
			break;
		case 'I':
			prompt_ids = optarg;
			break;
		case 't':
			if (lm_cli_float(optarg, 0, 1e9, &tol) != 0)
				return lm_cli_usage_error("diff", "--tolerance expects a number");
			break;
		case 'e':
			external = optarg;
			break;
		case 'w':
			bin = optarg;
			break;
		case 'h':
			fputs(diff_usage, stdout);
			return 0;
		default:
			fputs(diff_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		config = argv[optind++];
	if (optind < argc)
		return lm_cli_usage_error("diff", "unexpected argument '%s'", argv[optind]);
	if ((prompt == NULL) == (prompt_ids == NULL))
		return lm_cli_usage_error("diff", "one of --prompt and --prompt-ids is required");

	static struct diff_ctx c;
	lm_diag d = {{0}};
	tok_vocab *vocab = NULL;
	float *ext = NULL;
	int rc, status = 1;
	char binbuf[1100];
	if (bin == NULL)
		bin = diff_default_bin(binbuf, sizeof binbuf);
	signal(SIGPIPE, SIG_IGN);
	if ((rc = mesh_config_load(&c.cfg, config, &d)) != 0 ||
	    (rc = planner_plan(&c.cfg, &c.plan, NULL, &d)) != 0)
		goto out;
	if ((rc = diff_prompt(&c, prompt, prompt_ids, &vocab, &d)) != 0 ||
	    (rc = diff_single(&c, &d)) != 0)
		goto out;
	const char *kind = NULL;
	int32_t nonfinite = diff_first_nonfinite(&c, &kind);
	if (nonfinite >= 0)
		printf("the single process: layer %d is the first whose hidden state is not finite "
		       "(%s)\n",
		       nonfinite, kind);
	bool found = false;
	if ((rc = diff_run_mesh(&c, bin, &found, &d)) != 0 || found)
		goto out;
	int32_t ext_rows = 0;
	if (external != NULL &&
	    (ext = diff_read_external(external, c.n_layer, c.dim, c.n, &ext_rows, &d)) == NULL) {
		rc = LM_EFORMAT;
		goto out;
	}

	status = diff_report(&c, ext, ext_rows, tol);
out:
	if (rc != 0)
		fprintf(stderr, "layermesh diff: %s\n", lm_diag_str(&d, rc));
	diff_stop_mesh(&c);
	free(c.w);
	free(ext);
	free(c.ids);
	free(c.ref);
	free(c.mesh);
	tok_free(vocab);
	lm_engine_close(&c.eng);
	fence_plan_fini(&c.plan);
	mesh_config_fini(&c.cfg);
	return status;
}
