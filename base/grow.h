/* grow.h — an array that doubles as it fills. */
#ifndef RQ_BASE_GROW_H
#define RQ_BASE_GROW_H

#include <errno.h>
#include <stdlib.h>

/* Makes room for element n of arr (cap allocated; `first` the first
 * allocation's count): 0, or -ENOMEM with arr and cap unchanged. Works for
 * any element type: arr and cap are lvalues, evaluated more than once. */
#define RQ_GROW(arr, n, cap, first) __extension__ ({                          \
	int rq_grow_rc = 0;                                                        \
	if ((size_t)(n) >= (size_t)(cap)) {                                        \
		size_t rq_grow_nc = (cap) ? (size_t)(cap) * 2 : (size_t)(first);        \
		__typeof__(arr) rq_grow_v = realloc((arr), rq_grow_nc * sizeof *(arr)); \
		if (rq_grow_v) {                                                       \
			(arr) = rq_grow_v;                                                 \
			(cap) = rq_grow_nc;                                                \
		} else {                                                               \
			rq_grow_rc = -ENOMEM;                                              \
		}                                                                      \
	}                                                                          \
	rq_grow_rc; })

#endif
