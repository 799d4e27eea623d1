/* listener.h - stopping a TCP listener without resetting clients. A
 * listener's close resets every connection still in its queue, and a
 * client cannot tell such a reset from a request lost half-way. So a
 * stopping server first makes the listener drop new SYNs (the client
 * retries a second later and finds the port closed, or a new instance on
 * it), then takes what is queued, then closes it. Shared by the HTTP and
 * gRPC listeners, owned by neither. */
#ifndef RL_LISTENER_H
#define RL_LISTENER_H

#include <stdbool.h>

/* Makes fd, a listening TCP socket, drop every new SYN; handshakes already
 * under way still complete into its queue. False (errno set) if the kernel
 * refused the filter. */
bool listener_drop_syns(int fd);

#endif
