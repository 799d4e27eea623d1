/* listener.c - see listener.h. */
#include "listener.h"

#include <linux/filter.h>
#include <sys/socket.h>

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
