/* mountinfo.c — /proc/self/mountinfo lines, decoded (mountinfo.h).
 *
 * A line (proc(5)):
 *   ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
 * Fields are separated by single spaces and never hold a raw space, tab,
 * newline or backslash (those are escaped), so splitting on ' ' is exact. */
#include "fs/mountinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_oct(char c)
{
	return c >= '0' && c <= '7';
}

void rq_mountinfo_unescape(char *s)
{
	char *o = s;
	for (const char *i = s; *i;) {
		if (i[0] == '\\' && is_oct(i[1]) && is_oct(i[2]) && is_oct(i[3])) {
			int v = (i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0');
			if (v > 0 && v < 256) {
				*o++ = (char)v;
				i += 4;
				continue;
			}
		}
		*o++ = *i++;
	}
	*o = 0;
}

/* Splits line into its fields; 0 when it has the ones we read. */
static int fields(char *line, char **dev, char **mp, char **type, char **src)
{
	char *save = NULL, *f[6], *t;
	int n = 0;
	line[strcspn(line, "\n")] = 0;
	while (n < 6 && (t = strtok_r(n ? NULL : line, " ", &save)))
		f[n++] = t;
	if (n < 6)
		return -1;
	/* the optional fields end at a lone "-" */
	while ((t = strtok_r(NULL, " ", &save)) && strcmp(t, "-"))
		;
	if (!t || !(*type = strtok_r(NULL, " ", &save)) || !(*src = strtok_r(NULL, " ", &save)))
		return -1;
	*dev = f[2];
	*mp = f[4];
	return 0;
}

int rq_mountinfo_find(const char *mnt, struct rq_mountinfo *out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	char *line = NULL;
	size_t cap = 0;
	int rc = -ENOENT;
	errno = 0;
	while (getline(&line, &cap, f) > 0) {
		char *dev, *mp, *type, *src;
		if (fields(line, &dev, &mp, &type, &src))
			continue;
		rq_mountinfo_unescape(mp);
		if (strcmp(mp, mnt))
			continue;
		rq_mountinfo_unescape(type);
		rq_mountinfo_unescape(src);
		snprintf(out->dev, sizeof out->dev, "%s", dev);
		snprintf(out->fstype, sizeof out->fstype, "%s", type);
		snprintf(out->source, sizeof out->source, "%s", src);
		rc = 0;                  /* the last match is the topmost mount */
	}
	if (errno == ENOMEM)
		rc = -ENOMEM;
	free(line);
	fclose(f);
	return rc;
}
