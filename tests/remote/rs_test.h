/* rs_test.h — the harness of tests/remote/test_rstore.c (rs_harness.c):
 * the test files and their hashes, the fault-injecting hub (hub_fault.py)
 * started and steered over /_ctl/, stores opened on named caches. */
#ifndef RQ_TESTS_REMOTE_RS_TEST_H
#define RQ_TESTS_REMOTE_RS_TEST_H

#include "remote/rstore.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <stdint.h>

#define CS (256u * 1024u)          /* the chunk size of these tests */
#define COMMIT "0123456789abcdef0123456789abcdef01234567"

enum { FA, FB, FC, FD, FE, FF, NF };
extern const char *names[NF];
extern const uint64_t sizes[NF];
extern uint8_t *data[NF];          /* the files' bytes */
extern char shas[NF][65], blobs[NF][41];
extern struct rq_rs_file files[NF];   /* FC has only its git blob id */
extern char tmp[256], endpoint[64];

/* Writes the files under tmp/data and starts the hub on them; 0 or -1 (said). */
int rs_setup(const char *hub_py);
/* Stops the hub, frees the files' bytes (tmp stays: the caller removes it). */
void rs_teardown(void);

void on_log(void *ctx, const char *msg);
int log_has(const char *s);        /* a store logged a line holding s */
const char *logbuf_tail(void);    /* the last 300 bytes the stores logged ('|' for newlines) */
double now_s(void);
cJSON *ctl(const char *q);         /* GET /_ctl/<q>: the hub's state (caller frees) */
void ctl_do(const char *q);        /* "reset" first waits for requests in flight (<= 2 s) */
int ranges_of(cJSON *st, int f, long c);
int nranges(void);
double stat_num(const char *key);
struct rq_rs *open_store(const char *cache, int conns, int ra, uint64_t mem, int offline);
/* 0: the bytes read equal the file's; 1: wrong bytes; else the -errno. */
int read_eq(struct rq_rs *s, int f, uint64_t off, uint64_t len, unsigned flags,
            struct rq_err *e);
int dir_entries(const char *rel);  /* entries under tmp/rel */
void git_blob_id(const void *p, uint64_t n, char hex[41]);

struct fetcher {
	struct rq_rs *s;
	int f, rc;
};
void *fetcher_main(void *v);       /* rq_rs_fetch_file of x->f into x->rc */

#endif
