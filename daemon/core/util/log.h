/* The daemon's log: one line per event on stderr.  Under systemd
 * (JOURNAL_STREAM set) lines carry a <N> syslog priority prefix so the
 * journal records their level. */
#ifndef EXL_LOG_H
#define EXL_LOG_H

enum exl_log_level { EXL_LOG_ERR = 3, EXL_LOG_WARN = 4, EXL_LOG_INFO = 6, EXL_LOG_DEBUG = 7 };

void exl_log_init(void);
void exl_log_set_level(enum exl_log_level max);

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void exl_log(enum exl_log_level level, const char *fmt, ...);

#endif
