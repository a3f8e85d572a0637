/* The daemon's event loop (server.c): the listening socket (its own or
 * systemd's), accepting connections, the mailbox from the other threads,
 * signals, sd_notify, the watchdog and the drain at shutdown.  What its
 * parts share is in loop.h.
 */
#ifndef EXL_SERVER_H
#define EXL_SERVER_H

#include "daemon/server/wire/config.h"

/* The daemon's main: runs until SIGTERM / SIGINT (returns 0 after the
 * drain) or a fatal start-up error (returns 1 with a message logged). */
int exl_server_run(const struct exl_config *cfg);

#endif
