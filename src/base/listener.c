/* listener.c - see listener.h. */
#include "listener.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A socket filter sees a TCP segment from its TCP header: byte 13 holds the
 * flags. A SYN without ACK is dropped; everything else is kept. Accepted
 * connections inherit the filter, and never receive such a segment. */
bool listener_drop_syns(int fd)
{
    static struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),         /* SYN | ACK */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 1),   /* SYN alone? */
        BPF_STMT(BPF_RET | BPF_K, 0),                      /* drop */
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),            /* keep */
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;
}

static int unix_addr(const char *path, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a->sun_path)
        return -1;
    strcpy(a->sun_path, path);
    return 0;
}

/* What is at path: 0 nothing (or a stale socket, removed), -1 with err
 * when it may not be replaced. */
static int clear_stale(const char *path, const struct sockaddr_un *a, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "unix:%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "unix:%s exists and is not a socket: not replaced", path);
        return -1;
    }
    /* A socket: does anybody answer on it? A non-blocking connect to a Unix
     * socket is decided at once: refused when nobody listens, EAGAIN when
     * somebody does and its queue is full. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) {
        snprintf(err, errlen, "unix:%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = connect(probe, (const struct sockaddr *)a, sizeof *a);
    int e = errno;
    close(probe);
    if (rc == 0 || e == EAGAIN) {
        snprintf(err, errlen, "unix:%s: another process serves this socket", path);
        return -1;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, errlen, "unix:%s: cannot tell whether another process serves it: %s", path, strerror(e));
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "unix:%s: a stale socket that cannot be removed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int listener_unix_bind(const char *path, int mode, listener_file *file, char *err, size_t errlen)
{
    struct sockaddr_un a;
    if (unix_addr(path, &a) < 0) {
        snprintf(err, errlen, "unix:%s: the path is too long", path);
        return -1;
    }
    if (clear_stale(path, &a, err, errlen) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "unix:%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    /* The mode is set between bind and listen: until listen, a connect is
     * refused, so nobody gets in under the umask's mode. */
    if (bind(fd, (const struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(err, errlen, "unix:%s: cannot bind: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    static const char *const steps[] = {"set its mode", "find its file", "listen"};
    int failed = chmod(path, (mode_t)mode) != 0                    ? 0
                 : lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) ? 1
                 : listen(fd, SOMAXCONN) != 0                      ? 2
                                                                   : -1;
    if (failed >= 0) {
        int e = errno;
        snprintf(err, errlen, "unix:%s: cannot %s: %s", path, steps[failed], strerror(e));
        close(fd);
        unlink(path);
        return -1;
    }
    file->dev = st.st_dev;
    file->ino = st.st_ino;
    return fd;
}

bool listener_unix_remove(const char *path, const listener_file *file)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_dev != file->dev || st.st_ino != file->ino)
        return false;
    return unlink(path) == 0;
}
