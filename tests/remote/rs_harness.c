/* rs_harness.c — the harness of test_rstore.c (rs_test.h). */
#include "tests/remote/rs_test.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *names[NF] = {"model-00001-of-00002.safetensors",
                         "model-00002-of-00002.safetensors", "config.json",
                         "bad.safetensors", "fault.bin", "mem.bin"};
const uint64_t sizes[NF] = {3 * 1024 * 1024 + 4567, 2 * 1024 * 1024 + 100, 3000,
                            1024 * 1024 + 1, 2 * 1024 * 1024, 4 * 1024 * 1024};
uint8_t *data[NF];
char shas[NF][65], blobs[NF][41];
struct rq_rs_file files[NF];
char tmp[256], endpoint[64];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logbuf[1 << 16];
static int hub_in = -1;            /* the hub's stdin: closing it stops it */
static pid_t hub_pid = -1;

void on_log(void *ctx, const char *msg)
{
	(void)ctx;
	pthread_mutex_lock(&log_mu);
	size_t l = strlen(logbuf);
	snprintf(logbuf + l, sizeof logbuf - l, "%s\n", msg);
	pthread_mutex_unlock(&log_mu);
}

const char *logbuf_tail(void)
{
	static char tail[320];
	pthread_mutex_lock(&log_mu);
	size_t l = strlen(logbuf);
	size_t from = l > 300 ? l - 300 : 0;
	memcpy(tail, logbuf + from, l - from + 1);
	pthread_mutex_unlock(&log_mu);
	for (char *p = tail; *p; p++)
		if (*p == '\n')
			*p = '|';
	return tail;
}

int log_has(const char *s)
{
	pthread_mutex_lock(&log_mu);
	int r = strstr(logbuf, s) != NULL;
	pthread_mutex_unlock(&log_mu);
	return r;
}

double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct body { char *p; size_t n; };

size_t on_body(char *p, size_t size, size_t n, void *v)
{
	struct body *b = v;
	char *q = realloc(b->p, b->n + size * n + 1);
	if (!q)
		return 0;
	memcpy(q + b->n, p, size * n);
	b->p = q;
	b->n += size * n;
	q[b->n] = 0;
	return size * n;
}

/* GET /_ctl/<q> of the hub: its JSON state (parsed; the caller frees). */
cJSON *ctl(const char *q)
{
	char url[512];
	snprintf(url, sizeof url, "%s/_ctl/%s", endpoint, q);
	struct body b = {0};
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	CURLcode cc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	cJSON *j = cc == CURLE_OK && b.p ? cJSON_Parse(b.p) : NULL;
	free(b.p);
	if (!j) {
		printf("Bail out! the test hub does not answer %s\n", url);
		exit(1);
	}
	return j;
}

void ctl_do(const char *q)
{
	if (!strcmp(q, "reset")) {   /* first let a closed store's stragglers end (<= 2 s) */
		for (int i = 0; i < 100; i++) {
			cJSON *st = ctl("stats");
			int active = cJSON_GetObjectItem(st, "active")->valueint;
			cJSON_Delete(st);
			if (!active)
				break;
			usleep(20000);
		}
	}
	cJSON_Delete(ctl(q));
}

/* Range answers the server sent for file f overlapping chunk c (c < 0: any). */
int ranges_of(cJSON *st, int f, long c)
{
	int n = 0;
	cJSON *r;
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(st, "ranges")) {
		const char *nm = cJSON_GetArrayItem(r, 0)->valuestring;
		double a = cJSON_GetArrayItem(r, 1)->valuedouble, b = cJSON_GetArrayItem(r, 2)->valuedouble;
		if (strcmp(nm, names[f]))
			continue;
		if (c < 0 || (a <= (double)(c + 1) * CS - 1 && b >= (double)c * CS))
			n++;
	}
	return n;
}

int nranges(void)
{
	cJSON *st = ctl("stats");
	int n = cJSON_GetArraySize(cJSON_GetObjectItem(st, "ranges"));
	cJSON_Delete(st);
	return n;
}

double stat_num(const char *key)
{
	cJSON *st = ctl("stats");
	double v = cJSON_GetObjectItem(st, key)->valuedouble;
	cJSON_Delete(st);
	return v;
}

struct rq_rs *open_store(const char *cache, int conns, int ra, uint64_t mem, int offline)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp, cache);
	struct rq_rs_opts o = {.endpoint = endpoint, .repo = "test/remote", .commit = COMMIT,
	                       .files = files, .nfiles = NF, .cache_dir = dir, .chunk_size = CS,
	                       .connections = conns, .readahead = ra, .mem_max = mem,
	                       .offline = offline, .log = on_log};
	struct rq_rs *s = NULL;
	struct rq_err e = {0};
	int rc = rq_rs_open(&o, &s, &e);
	if (rc) {
		printf("Bail out! rq_rs_open(%s): %d %s\n", cache, rc, e.msg);
		exit(1);
	}
	return s;
}

int read_eq(struct rq_rs *s, int f, uint64_t off, uint64_t len, unsigned flags,
                   struct rq_err *e)
{
	uint8_t *buf = malloc(len ? len : 1);
	struct rq_err e0 = {0};
	int rc = rq_rs_read(s, (size_t)f, off, len, buf, flags, e ? e : &e0);
	if (!rc && memcmp(buf, data[f] + off, len))
		rc = 1;   /* wrong bytes */
	if (rc && !e && rc != 1)
		printf("#   read %s %llu+%llu: %d %s\n", names[f], (unsigned long long)off,
		       (unsigned long long)len, rc, e0.msg);
	free(buf);
	return rc;
}

int dir_entries(const char *rel)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", tmp, rel);
	DIR *d = opendir(p);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* git's blob id of n bytes: sha1("blob <n>\0" + bytes), 40 hex. */
void git_blob_id(const void *p, uint64_t n, char hex[41])
{
	char hdr[32];
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned int dn;
	int hn = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)n);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha1(), NULL);
	EVP_DigestUpdate(md, hdr, (size_t)hn + 1);
	EVP_DigestUpdate(md, p, n);
	EVP_DigestFinal_ex(md, d, &dn);
	EVP_MD_CTX_free(md);
	for (unsigned i = 0; i < 20; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

void *fetcher_main(void *v)
{
	struct fetcher *x = v;
	struct rq_err e = {0};
	x->rc = rq_rs_fetch_file(x->s, (size_t)x->f, NULL, NULL, &e);
	if (x->rc)
		printf("#   fetch_file: %d %s\n", x->rc, e.msg);
	return NULL;
}

/* The hash of a file's bytes: lowercase hex of EVP md into hex. */
static void digest_hex(const EVP_MD *md, const void *p, size_t n, char *hex)
{
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, md, NULL);
	EVP_DigestUpdate(c, p, n);
	EVP_DigestFinal_ex(c, d, &dn);
	EVP_MD_CTX_free(c);
	for (unsigned i = 0; i < dn; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int rs_setup(const char *hub_py)
{
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmp, sizeof tmp, "/tmp/rq-rstore-XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("Bail out! mkdtemp\n");
		return -1;
	}
	char dd[300];
	snprintf(dd, sizeof dd, "%s/data", tmp);
	mkdir(dd, 0755);
	uint64_t x = 0x9e3779b97f4a7c15ull;   /* the files' bytes: a fixed LCG */
	for (int f = 0; f < NF; f++) {
		data[f] = malloc(sizes[f]);
		for (uint64_t i = 0; i < sizes[f]; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			data[f][i] = (uint8_t)(x >> 56);
		}
		char p[400];
		snprintf(p, sizeof p, "%s/%s", dd, names[f]);
		FILE *fp = fopen(p, "wb");
		if (!fp || fwrite(data[f], 1, sizes[f], fp) != sizes[f] || fclose(fp)) {
			printf("Bail out! cannot write %s\n", p);
			return -1;
		}
		digest_hex(EVP_sha256(), data[f], sizes[f], shas[f]);
		git_blob_id(data[f], sizes[f], blobs[f]);   /* given for FC only */
		files[f] = (struct rq_rs_file){.name = names[f], .size = sizes[f],
		                               .sha256 = f == FC ? NULL : shas[f],
		                               .blob_id = f == FC ? blobs[f] : NULL};
	}
	/* the hub: stdout gives its ports; it exits when our pipe to it closes */
	int out[2], in[2];
	if (pipe(out) || pipe(in)) {
		printf("Bail out! pipe\n");
		return -1;
	}
	hub_pid = fork();
	if (hub_pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		const char *py = getenv("RQ_PYTHON") ? getenv("RQ_PYTHON") : "python3";
		execlp(py, py, hub_py, dd, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	hub_in = in[1];
	FILE *po = fdopen(out[0], "r");
	int hubport = 0, cdnport = 0;
	if (!po || fscanf(po, "%d %d", &hubport, &cdnport) != 2) {
		printf("Bail out! the test hub %s did not start\n", hub_py);
		return -1;
	}
	snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", hubport);
	printf("# hub %s, CDN port %d, files under %s\n", endpoint, cdnport, tmp);
	setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1", 1);   /* the stall fault: detected in ~1 s */
	unsetenv("HF_TOKEN");
	setenv("HF_TOKEN_PATH", "/nonexistent/token", 1);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}

void rs_teardown(void)
{
	if (hub_in >= 0)
		close(hub_in);
	if (hub_pid > 0)
		waitpid(hub_pid, NULL, 0);
	for (int f = 0; f < NF; f++)
		free(data[f]);
}
