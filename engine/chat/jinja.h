/* jinja.h — a Jinja-subset interpreter for Hugging Face chat templates.
 *
 * Renders a template the way transformers' apply_chat_template does (jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loopcontrols extension; tojson with ensure_ascii=False; raise_exception and
 * strftime_now as globals; default Undefined: empty when printed, falsy,
 * an error when used any other way).
 *
 * What it knows: {{ }}, {% %}, {# #} with - / + white-space control;
 * if/elif/else, for (loop.*, `for x in y if c`, else, break, continue), set
 * (tuple targets, namespace attributes, blocks), macro and calls to it,
 * generation; literals, lists, dicts, tuples, attributes, subscripts and
 * slices, filters, tests, `in`, not/and/or, comparisons, ~ + - * / // % **,
 * `a if c else b`; the string and dict methods chat templates call. Anything
 * else fails with its line and column and the construct named; nothing is
 * guessed.
 *
 *   vars: a JSON object whose members become the template's variables, e.g.
 *         {"messages": [{"role": "user", "content": "hi"}],
 *          "add_generation_prompt": true, "bos_token": "<s>", "tools": null}
 *         (JSON numbers without a fraction are ints, others floats). */
#ifndef RQ_ENGINE_JINJA_H
#define RQ_ENGINE_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct rq_err;

/* Renders tmpl[0..len) into a malloc'd NUL-terminated string. 0; -EINVAL when
 * the template cannot be parsed or rendered, or raises (raise_exception): err
 * says where and why; -ENOMEM.
 *
 * Bounded: at most 1 GiB of memory, values nested at most 200 deep, and the
 * work budget: every operation is charged for what it touches (a byte
 * copied, compared or scanned: 1 unit; an expression, a statement, an item
 * or a value compared: 32), and the render fails at the line and column where
 * it runs past the budget. Integers are 64-bit: a result jinja2 would give
 * as a bigger exact integer is refused, never wrapped. */
int jinja_render(const char *tmpl, size_t len, const struct cJSON *vars, char **out, size_t *out_len,
                 struct rq_err *err);

/* The default work budget: under a second of work on one loaded core; the
 * real chat templates of the tests use under a 500th of it on each golden
 * conversation (test_chat renders them all with budget / 500). */
#define JINJA_WORK_DEFAULT (1ULL << 28)

/* jinja_render with a work budget (0: JINJA_WORK_DEFAULT); *used (when not
 * NULL): the work charged, on success or failure. */
int jinja_render_budget(const char *tmpl, size_t len, const struct cJSON *vars, uint64_t budget, uint64_t *used,
                        char **out, size_t *out_len, struct rq_err *err);

#endif
