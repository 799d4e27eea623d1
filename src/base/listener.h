/* listener.h - listening sockets: stopping a TCP listener without resetting
 * clients, and a Unix socket's file.
 *
 * A listener's close resets every connection still in its queue, and a
 * client cannot tell such a reset from a request lost half-way. So a
 * stopping server first makes the listener take no new connection (a TCP
 * listener drops new SYNs: the client retries a second later and finds the
 * port closed, or a new instance on it; a Unix socket's file is removed:
 * a new client finds no such file, or the next instance's), then takes
 * what is queued, then closes it. Shared by the HTTP and gRPC listeners,
 * owned by neither. */
#ifndef RL_LISTENER_H
#define RL_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Makes fd, a listening TCP socket, drop every new SYN; handshakes already
 * under way still complete into its queue. False (errno set) if the kernel
 * refused the filter. */
bool listener_drop_syns(int fd);

/* The file a Unix listener made: removed at stop only while it is still
 * that one (a next instance may have replaced it). */
typedef struct listener_file {
    dev_t dev;
    ino_t ino;
} listener_file;

/* Binds and listens on a Unix socket at path (an absolute path), whose file
 * gets mode (e.g. 0660) before any client can connect. A file already at
 * path is replaced only when it is a socket that nobody answers on (left by
 * a server that died); a socket another process serves, or a file that is
 * not a socket, is refused. Returns the listening socket (non-blocking,
 * close-on-exec) with *file set, or -1 with err (one line). */
int listener_unix_bind(const char *path, int mode, listener_file *file, char *err, size_t errlen);

/* Removes path if it is still the socket file `file` names. Returns
 * whether it did. */
bool listener_unix_remove(const char *path, const listener_file *file);

#endif
