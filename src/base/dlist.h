/* dlist.h - the doubly linked lists of the service: a list is a head
 * pointer, and each node carries its own two links (prev and next, or any
 * other pair of field names). Not thread-safe: the list's owner guards it.
 * Header-only; owned by no layer. */
#ifndef RL_DLIST_H
#define RL_DLIST_H

/* Puts node first in the list at head. */
#define DLIST_PUSH(head, node, prev, next) \
    do {                                   \
        (node)->prev = NULL;               \
        (node)->next = (head);             \
        if (head)                          \
            (head)->prev = (node);         \
        (head) = (node);                   \
    } while (0)

/* Takes node out of the list at head (its own links are left as they were). */
#define DLIST_UNLINK(head, node, prev, next)       \
    do {                                           \
        if ((node)->prev)                          \
            (node)->prev->next = (node)->next;     \
        else                                       \
            (head) = (node)->next;                 \
        if ((node)->next)                          \
            (node)->next->prev = (node)->prev;     \
    } while (0)

#endif
