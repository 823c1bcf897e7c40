/* actq_logits.c — the CPU engine's logits for test_actq_forward.py.
 *
 * usage: actq_logits MODEL_DIR OUT TOKEN...
 * Writes [n][vocab] float32 (host order) to OUT: the logits after each of the
 * n tokens, fed as one batch, then prints "n_act N" (Linears whose input the
 * engine quantizes). RQ_ENGINE_ACT_QUANT=0 in the environment: none. */
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: actq_logits MODEL_DIR OUT TOKEN...\n");
		return 2;
	}
	struct rq_err err = {0};
	struct lg_model *m = NULL;
	struct lg_state *s = NULL;
	int n = argc - 3, rc;
	int *tok = malloc(sizeof *tok * n);
	for (int i = 0; i < n; i++)
		tok[i] = atoi(argv[3 + i]);
	if ((rc = lg_model_open(argv[1], &m, &err)) || (rc = lg_state_create(m, n, n, NULL, &s, &err))) {
		fprintf(stderr, "actq_logits: %s\n", err.msg);
		return 1;
	}
	float *logits = malloc(sizeof *logits * (size_t)n * m->cfg.vocab);
	if ((rc = lg_forward(s, tok, n, logits, n, &err))) {
		fprintf(stderr, "actq_logits: %s\n", err.msg);
		return 1;
	}
	FILE *f = fopen(argv[2], "wb");
	if (!f || fwrite(logits, sizeof *logits, (size_t)n * m->cfg.vocab, f) != (size_t)n * m->cfg.vocab ||
	    fclose(f)) {
		fprintf(stderr, "actq_logits: cannot write %s\n", argv[2]);
		return 1;
	}
	printf("n_act %d\n", m->n_act);
	free(logits);
	free(tok);
	lg_state_free(s);
	lg_model_close(m);
	return 0;
}
