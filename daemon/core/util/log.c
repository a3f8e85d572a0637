/* Daemon log lines on stderr. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/core/util/log.h"

static bool journal;
static enum exl_log_level max_level = EXL_LOG_INFO;

void exl_log_init(void)
{
	journal = getenv("JOURNAL_STREAM") != NULL;
}

void exl_log_set_level(enum exl_log_level max)
{
	max_level = max;
}

void exl_log(enum exl_log_level level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line: stdio locks the stream, so lines from
	 * different threads do not interleave. */
	if (journal)
		fprintf(stderr, "<%d>%s\n", (int)level, line);
	else
		fprintf(stderr, "exld: %s\n", line);
}
