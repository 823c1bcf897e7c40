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

struct cJSON;
struct rq_err;

/* Renders tmpl[0..len) into a malloc'd NUL-terminated string. 0; -EINVAL when
 * the template cannot be parsed or rendered, or raises (raise_exception): err
 * says where and why; -ENOMEM. */
int jinja_render(const char *tmpl, size_t len, const struct cJSON *vars, char **out, size_t *out_len,
                 struct rq_err *err);

#endif
