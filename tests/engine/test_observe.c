/* test_observe.c — the calibration observer (engine/model/observe.h) against
 * transformers: for each tiny family model, the max|x| at every quantizable
 * Linear's input that the CPU forward records equals the golden amax that
 * tools/golden/gen_observe_golden.py computed with forward hooks in transformers
 * (float32; routed experts recomputed from the routed rows), within 1e-4
 * relative; the set of observed modules is the golden's, exactly; routed
 * experts over their tokens, and with all_experts over every token; and
 * observing changes no logit (the forward keeps its top-k).
 *
 * usage: test_observe MODELS_DIR GOLDEN_DIR name...  (tests/data/tiny or .models) */
#include "tests/tap.h"
#include "base/err.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/observe.h"

#include <math.h>

struct gold {
	char name[256];
	float amax;
	int all;          /* 1: an "all" line (--all-experts figure) */
	int seen;
};

static int load_gold(const char *path, int *tok, int *ntok, struct gold *g, int *ng)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "tokens %d", ntok) != 1 || *ntok > 256)
		return fclose(f), -1;
	for (int i = 0; i < *ntok; i++)
		if (fscanf(f, "%d", &tok[i]) != 1)
			return fclose(f), -1;
	char kind[16];
	*ng = 0;
	while (*ng < 4096 && fscanf(f, "%15s %255s %f", kind, g[*ng].name, &g[*ng].amax) == 3) {
		g[*ng].all = !strcmp(kind, "all");
		g[*ng].seen = 0;
		(*ng)++;
	}
	fclose(f);
	return 0;
}

/* One pass with the observer (batches of 5 tokens: several batches, ring
 * of the observer across them); checks against the golden lines of `all`. */
static void check(const char *fam, const struct lg_model *m, const int *tok, int n,
                  struct gold *g, int ng, int all, const float *ref_logits)
{
	size_t ns = lg_obs_count(m);
	struct lg_obs obs = {.amax = calloc(ns, sizeof(float)), .tokens = calloc(ns, sizeof(long)),
	                     .all_experts = all};
	struct lg_state *s = NULL;
	struct rq_err err = {0};
	float *logits = malloc((size_t)n * m->cfg.vocab * sizeof *logits);
	int rc = lg_state_create(m, n, 5, NULL, &s, &err);
	TAP_OK(rc == 0, "%s: state (%s)", fam, err.msg);
	if (rc)
		return;
	lg_state_observe(s, &obs);
	rc = lg_forward(s, tok, n, logits, n, &err);
	TAP_OK(rc == 0, "%s: forward with the observer%s (%s)", fam, all ? ", all experts" : "", err.msg);
	if (ref_logits)
		TAP_OK(!memcmp(logits, ref_logits, (size_t)n * m->cfg.vocab * sizeof *logits),
		       "%s: observing%s changes no logit", fam, all ? " every expert" : "");
	int named = 0, matched = 0, bad = 0, missing = 0;
	for (int j = 0; j < ng; j++)
		g[j].seen = 0;
	char name[256];
	for (size_t i = 0; i < ns; i++) {
		if (lg_obs_name(m, i, name, sizeof name))
			continue;
		int is_expert = strstr(name, ".experts.") != NULL;
		if (all && !is_expert)
			continue;
		named++;
		int hit = -1;
		for (int j = 0; j < ng && hit < 0; j++)
			if (g[j].all == all && !strcmp(g[j].name, name))
				hit = j;
		if (hit < 0) {
			if (obs.tokens[i] || !is_expert) {   /* an expert no token reached is not in the golden */
				printf("# %s: %s observed (%g) but not in the golden\n", fam, name, obs.amax[i]);
				missing++;
			}
			continue;
		}
		g[hit].seen = 1;
		double d = fabs(obs.amax[i] - g[hit].amax) / g[hit].amax;
		if (!(d <= 1e-4)) {
			printf("# %s: %s amax %.9g, transformers %.9g\n", fam, name, obs.amax[i], g[hit].amax);
			bad++;
		} else {
			matched++;
		}
	}
	int unseen = 0;
	for (int j = 0; j < ng; j++)
		if (g[j].all == all && !g[j].seen) {
			printf("# %s: golden %s not observed by the engine\n", fam, g[j].name);
			unseen++;
		}
	TAP_OK(matched > 0 && !bad && !missing && !unseen,
	       "%s%s: %d inputs' amax equal transformers' (%d differ, %d only here, %d only there)",
	       fam, all ? " (all experts)" : "", matched, bad, missing, unseen);
	lg_state_free(s);
	free(obs.amax);
	free(obs.tokens);
	free(logits);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: test_observe TINY_DIR GOLDEN_DIR family...\n");
		return 2;
	}
	static struct gold g[4096];
	for (int a = 3; a < argc; a++) {
		const char *fam = argv[a];
		char dir[1024], gp[1024];
		snprintf(dir, sizeof dir, "%s/%s", argv[1], fam);
		snprintf(gp, sizeof gp, "%s/%s.txt", argv[2], fam);
		int tok[256], n = 0, ng = 0;
		TAP_OK(load_gold(gp, tok, &n, g, &ng) == 0, "%s: golden %s read", fam, gp);
		struct lg_model *m = NULL;
		struct rq_err err = {0};
		int rc = lg_model_open(dir, &m, &err);
		TAP_OK(rc == 0, "%s: model opens (%s%s)", fam, err.msg,
		       rc && strstr(dir, ".models") ? "; run tools/setup-model" : "");
		if (rc)
			continue;
		/* the logits without an observer: the reference of "changes nothing" */
		struct lg_state *s = NULL;
		float *ref = malloc((size_t)n * m->cfg.vocab * sizeof *ref);
		if (lg_state_create(m, n, 5, NULL, &s, &err) || lg_forward(s, tok, n, ref, n, &err)) {
			TAP_OK(0, "%s: plain forward (%s)", fam, err.msg);
		} else {
			check(fam, m, tok, n, g, ng, 0, ref);
			if (m->cfg.n_experts > 0)
				check(fam, m, tok, n, g, ng, 1, ref);
		}
		lg_state_free(s);
		free(ref);
		lg_model_close(m);
	}
	return tap_done();
}
