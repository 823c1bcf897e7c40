/* jcheck.h — the one gate every JSON input passes before cJSON reads it.
 *
 * cJSON is lax where Python's json (what transformers, vLLM and
 * huggingface_hub read the same files with) is strict, and the two read some
 * documents differently. A file we present must mean the same to every
 * reader, so jc_check accepts exactly the documents on which cJSON and
 * Python's json.loads agree, and refuses the rest naming the file, the byte
 * (line, column) and, for duplicates, the key path. What it refuses:
 *  - duplicate keys in any object at any depth (compared after decoding
 *    escapes; cJSON keeps the first, Python the last);
 *  - anything outside RFC 8259's grammar as Python reads it: whitespace
 *    other than space, tab, CR, LF (cJSON skips every byte <= 32), raw
 *    control characters in strings, bad escapes, numbers such as 01, 1.,
 *    +1, NaN, Infinity (Python reads NaN/Infinity, cJSON does not), a
 *    byte-order mark, and any data after the value (cJSON stops reading
 *    there, Python refuses);
 *  - text that is not valid UTF-8, and \u escapes of lone surrogates;
 *  - \u0000 in a string or key (C strings would cut it);
 *  - integers that a double cannot hold exactly (cJSON stores numbers as
 *    doubles: 9007199254740993 would read as ...992; 10**30 written out
 *    in full is exact and accepted), and numbers beyond the double range;
 *  - nesting deeper than JC_MAX_DEPTH.
 * On what it accepts, cJSON's tree holds the same keys, strings and numbers
 * as Python's (floats are the same correctly rounded doubles). */
#ifndef RQ_ST_JCHECK_H
#define RQ_ST_JCHECK_H

#include <stddef.h>
#include <cjson/cJSON.h>

struct rq_err;

#define JC_MAX_DEPTH 128

/* 0, or -EPROTO with err naming file (used as given) and what is wrong;
 * -ENOMEM. */
int jc_check(const char *text, size_t len, const char *file, struct rq_err *err);

/* Only the duplicate-key rule (and the grammar), for text that no cJSON
 * reads but that other readers do: a safetensors header, whose extra fields
 * serde ignores whatever their values. */
int jc_check_keys(const char *text, size_t len, const char *file, struct rq_err *err);

/* jc_check, then cJSON_ParseWithLength: the document, or NULL with err
 * written (-EPROTO / -ENOMEM in err->code). text is not freed. */
cJSON *jc_parse(const char *text, size_t len, const char *file, struct rq_err *err);

#endif
