/* cli.h — the subcommands of `requantfs` and what they share.
 *
 * Each cmd_* parses its own options (getopt_long), prints --help, and returns
 * the process exit code: 0 ok, 1 runtime failure, 2 usage error. */
#ifndef RQ_TOOLS_CLI_H
#define RQ_TOOLS_CLI_H

#include <stdio.h>

int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_calib(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkckpt(int argc, char **argv);
int cmd_plan(int argc, char **argv);

/* Prints "requantfs <cmd>: <message>\n" to stderr; returns code. */
int cli_fail(int code, const char *cmd, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Parses sizes like "1G", "512M", "4096" into bytes. -EINVAL if malformed. */
int cli_parse_size(const char *s, unsigned long long *out);

/* Model arguments that may be hub repo ids (README "Hub repo ids"): *model
 * (SRC or a model DIR) and *calib (--calib); either pointer, or what it points
 * to, may be NULL. An argument naming an existing path is kept as it is (a
 * path always wins); otherwise one shaped ORG/NAME[@REV] is replaced by its
 * snapshot directory in the local hub cache (plan/hub_cache.h; the string lives
 * until exit). A --calib id not in the cache is answered with the `requantfs
 * calib fetch` command to run. Returns -1 when both are ready, else prints
 * why ("requantfs <cmd>: ...") and returns the exit code, 1. */
int cli_hub_args(const char *cmd, const char **model, const char **calib);

/* The default cache directory, malloc'd: $XDG_CACHE_HOME/requantfs, else
 * ~/.cache/requantfs (/tmp/.cache/requantfs without HOME). */
char *cli_default_cache(void);

/* Runs `requantfs ARGS...` (this very binary; args NULL-terminated, at most
 * 14) with stdout to /dev/null and stderr kept: 0 when it exits 0, else -1. */
int cli_run_self(char *const args[]);

/* "1.5 GiB", "512 B". */
void cli_human_bytes(double bytes, char *buf, size_t len);

/* Progress bar on stderr (only drawn when stderr is a terminal, or when
 * force is set). Thread-safe; redraws at most 10 times a second. */
struct cli_progress;
struct cli_progress *cli_progress_start(const char *label, unsigned long long total_units,
                                        unsigned long long total_bytes, int force);
void cli_progress_add(struct cli_progress *p, unsigned long long units, unsigned long long bytes);
void cli_progress_set(struct cli_progress *p, unsigned long long units, unsigned long long bytes);
void cli_progress_end(struct cli_progress *p);   /* final line; NULL is fine */
/* The final line while other threads may still add: later adds draw
 * nothing; p is not freed (for a command about to exit). NULL is fine. */
void cli_progress_stop(struct cli_progress *p);

#endif
